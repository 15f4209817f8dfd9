"""Step marks for loops that no torch.optim optimizer steps (_steps.py ranks the sources):
- a loop written with its own parameter update: each outermost backward pass
  (`torch.autograd.backward`, which `Tensor.backward` calls) begins an iteration;
- a loop with no backward at all, an evaluation script: each call of the model begins
  one. The model is the first module called from outside any module that holds a CUDA
  parameter (a loss or a transform holds none); PyTorch's global module hooks find it
  during that first call and are then removed, and a forward pre-hook on the model alone
  stays (it marks only while no better source marks, and then at calls that train, the
  model in train mode with grad, or at calls of a pass that keeps more at each: it reads
  the memory allocated on the model's device; _steps.py). The hook leaves the
  model as it was for what copies, saves or exports it: a copy (copy.deepcopy, pickle,
  torch.save of the whole model) holds a hook that does nothing and needs no gpumem to
  load, and torch.jit.script takes the hook off before it compiles the model's hooks.
Both only while torch.compile is not tracing, so that no compiled graph holds them.
"""
import functools
import sys
import threading
import weakref

from . import _steps


def _compiling_check(torch):
    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    if check is None:
        check = getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    return check or (lambda: False)


class BackwardMarks:
    """Wraps torch.autograd.backward; only the outermost call counts (a reentrant
    checkpoint calls it again from inside the backward, on the engine's threads)."""

    def __init__(self, marker, original, compiling):
        self.marker, self.original, self.compiling = marker, original, compiling
        self.depth = 0
        self.lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        with self.lock:
            self.depth += 1
            outermost = self.depth == 1
        try:
            if outermost and not self.compiling():
                self.marker.on_loop_start(_steps.SOURCE_BACKWARD)
            return self.original(*args, **kwargs)
        finally:
            with self.lock:
                self.depth -= 1


def watch_backward(torch, marker=None):
    """Marks at backward passes; once per process. Returns whether it installed."""
    autograd = getattr(torch, "autograd", None)
    original = getattr(autograd, "backward", None)
    if original is None or getattr(original, "_gpumem_marks", False):
        return False
    marks = BackwardMarks(marker or _steps.marker(), original, _compiling_check(torch))
    wrapper = functools.wraps(original)(lambda *a, **k: marks(*a, **k))
    wrapper._gpumem_marks = True
    autograd.backward = wrapper
    return True


class ModelCalls:
    """Finds the model with the global module hooks, then marks at each of its calls. A
    model that is freed (a batch-size finder's, a sweep's trial) starts the finding over,
    so the model trained next is found too."""

    def __init__(self, marker, hooks, compiling, grad_enabled=lambda: True,
                 memory_allocated=None):
        self.marker, self.hooks, self.compiling = marker, hooks, compiling
        self.grad_enabled, self.memory_allocated = grad_enabled, memory_allocated
        self.device = None  # the model's CUDA device
        self.depth = 0
        self.lock = threading.Lock()
        self.finding = []  # the global hooks' handles, while the model is not known
        self.model = None  # a weak reference to the model found

    def start(self):
        self.finding = [self.hooks.register_module_forward_pre_hook(self.before_call),
                        self.register_after(self.after_call)]

    def register_after(self, hook):
        register = self.hooks.register_module_forward_hook
        try:  # always_call: a call that raises still leaves its depth (torch >= 2.1)
            return register(hook, always_call=True)
        except TypeError:
            return register(hook)

    def before_call(self, module, args):
        if self.compiling():
            return
        with self.lock:  # nn.DataParallel calls its replicas on threads of its own
            self.depth += 1
            outermost = self.depth == 1 and bool(self.finding)
        if outermost and _cuda_device_of(module) is not None:
            self.marker.on_model_call_begins()

    def after_call(self, module, args, output):
        if self.compiling():
            return
        with self.lock:
            self.depth = max(0, self.depth - 1)
            device = _cuda_device_of(module) if self.depth == 0 and self.finding else None
            if device is None:
                return
            handles, self.finding = self.finding, []
        for handle in handles:
            handle.remove()
        self.device = device
        self.marker.on_loop_start(_steps.SOURCE_MODEL_CALL)  # the first: no mark
        module.register_forward_pre_hook(ModelCallHook(self))
        self.model = weakref.ref(module, self.model_freed)

    def model_freed(self, _ref):
        if self.finding or sys.is_finalizing():  # at exit, torch may be half torn down
            return
        self.depth = 0
        try:
            self.start()
        except Exception:  # noqa: BLE001 (a weakref callback must not raise)
            self.finding = []

    def model_called(self, module):
        """The hook's call: marks for the model found alone (a shallow copy shares its
        hooks)."""
        if module is self.model() and not self.compiling():
            training = getattr(module, "training", True) and self.grad_enabled()
            self.marker.on_loop_start(_steps.SOURCE_MODEL_CALL, training, self.allocated)

    def allocated(self):
        """The memory allocated on the model's device, or None where it cannot be read."""
        if self.memory_allocated is None:
            return None
        try:
            return self.memory_allocated(self.device)
        except Exception:  # noqa: BLE001 (a step mark must never break the model call)
            return None


class ModelCallHook:
    """The model's forward pre-hook. Copied or pickled, it becomes `{}.get`, which returns
    the call's args unchanged: a copy neither marks nor needs gpumem to be loaded."""

    def __init__(self, calls):
        self.calls = calls

    def __call__(self, module, args):
        self.calls.model_called(module)

    def __reduce__(self):
        return getattr, ({}, "get")


def _is_model_call_hook(hook):
    """gpumem's hook, or what a copy of it became (`{}.get`)."""
    if isinstance(hook, ModelCallHook):
        return True
    owner = getattr(hook, "__self__", None)
    return type(owner) is dict and not owner and getattr(hook, "__name__", "") == "get"


def _without_model_call_hooks(module):
    """Takes gpumem's hooks (and copies of them) off `module` and everything under it."""
    for m in module.modules():
        for key, hook in list(m._forward_pre_hooks.items()):
            if _is_model_call_hook(hook):
                del m._forward_pre_hooks[key]


def _unhooking(original, modules_of):
    """`original`, taking gpumem's hooks off the modules `modules_of(args, kwargs)` names
    before it runs."""
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        for module in modules_of(args, kwargs):
            if hasattr(module, "modules"):
                _without_model_call_hooks(module)
        return original(*args, **kwargs)

    wrapper._gpumem_unhooks = True
    return wrapper


def watch_script(torch):
    """torch.jit.script compiles a module's hooks, and gpumem's is Python it cannot
    compile: the module to be scripted loses it first (its steps are then marked by the
    optimizer or backward alone). Returns whether it installed."""
    recursive = _steps.torch_submodule(torch, "jit._recursive")
    create = getattr(recursive, "create_script_module", None)
    if create is None or getattr(create, "_gpumem_unhooks", False):
        return False
    recursive.create_script_module = _unhooking(create, lambda args, kwargs: args[:1])
    return True


def watch_graphed_callables(torch):
    """make_graphed_callables refuses modules with hooks (a model called once before it is
    graphed, or a copy of one, holds gpumem's): they lose it first. Returns whether it
    installed."""
    graphs = _steps.torch_submodule(torch, "cuda.graphs")
    original = getattr(graphs, "make_graphed_callables", None)
    if original is None or getattr(original, "_gpumem_unhooks", False):
        return False

    def callables(args, kwargs):
        given = args[0] if args else kwargs.get("callables")
        return given if isinstance(given, (tuple, list)) else (given,)

    wrapper = _unhooking(original, callables)
    graphs.make_graphed_callables = wrapper
    cuda = getattr(torch, "cuda", None)
    if getattr(cuda, "make_graphed_callables", None) is original:
        cuda.make_graphed_callables = wrapper
    return True


def _cuda_device_of(module):
    """The device of the module's first CUDA parameter (its index, or "cuda" where it has
    none), None where it holds none."""
    for p in module.parameters():
        device = getattr(p, "device", None)
        if getattr(device, "type", None) == "cuda":
            index = getattr(device, "index", None)
            return "cuda" if index is None else index
    return None


def _module_hooks(torch):
    """torch.nn.modules.module, where PyTorch's global module hooks are registered; None
    where this torch lacks it."""
    return getattr(getattr(getattr(torch, "nn", None), "modules", None), "module", None)


def watch_data_parallel(torch, marker=None):
    """nn.DataParallel runs its replicas on threads of its own, new ones at each call: each
    notes itself as one running the loop, so that the activations it keeps for the
    backward pass are the loop's, not a helper's queued blocks. Returns whether it
    installed."""
    hooks = _module_hooks(torch)
    data_parallel = getattr(getattr(torch, "nn", None), "DataParallel", None)
    original = getattr(data_parallel, "parallel_apply", None)
    if (original is None or getattr(original, "_gpumem_notes_threads", False)
            or getattr(hooks, "register_module_forward_pre_hook", None) is None):
        return False
    marker = marker or _steps.marker()

    def note(module, args):
        marker.note_loop_thread()

    @functools.wraps(original)
    def parallel_apply(self, *args, **kwargs):
        handle = hooks.register_module_forward_pre_hook(note)
        try:
            return original(self, *args, **kwargs)
        finally:
            handle.remove()

    parallel_apply._gpumem_notes_threads = True
    data_parallel.parallel_apply = parallel_apply
    return True


def watch_model_calls(torch, marker=None):
    """Marks at the model's calls; once per process. Returns whether it installed."""
    hooks = _module_hooks(torch)
    if (getattr(hooks, "register_module_forward_pre_hook", None) is None
            or getattr(hooks, "_gpumem_model_calls", False)):
        return False
    grad_enabled = getattr(torch, "is_grad_enabled", None) or (lambda: True)
    allocated = getattr(getattr(torch, "cuda", None), "memory_allocated", None)
    ModelCalls(marker or _steps.marker(), hooks, _compiling_check(torch), grad_enabled,
               allocated).start()
    hooks._gpumem_model_calls = True
    watch_script(torch)
    watch_graphed_callables(torch)
    watch_data_parallel(torch, marker)
    return True
