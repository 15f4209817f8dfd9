"""Step marks with no code change: a step ends at each optimizer step, seen through
PyTorch's global optimizer step hooks (both modes). Loops that no torch.optim optimizer
steps are marked by their backward passes, loops with no backward (an evaluation
script) by the calls of their model (_loop_marks.py), and loops that only replay a
captured CUDA graph by its replays (_graph_marks.py).

Several optimizers stepping in one iteration (a GAN's, or one per parameter group) make
one step: the *lead* optimizer (the first that stepped) marks it. If another optimizer steps
twice while the lead does not step at all (the lead was a finder's throwaway optimizer),
that one becomes the lead (so an iteration whose lead was skipped but another optimizer
stepped still counts). GradScaler skips optimizer.step() when the gradients hold inf/NaN;
the hook does not fire then, so an iteration where every optimizer was skipped is not a
step.

A program that calls gpumem.step() itself keeps its own marks: from its first call on
the hooks mark nothing (that first call marks nothing either when a hook has already
marked, so the iteration is not counted twice).

The sources rank: gpumem.step(), then optimizer steps, then backward passes, then model
calls, then graph replays. Once one has marked, those below it mark nothing while it keeps
marking. A backward pass, a model call or a graph replay marks at its start, from the
second on: it ends the iteration before. So in a loop with an optimizer, which steps at
the end of the first iteration, they never mark. If the optimizer stops stepping while the
loop goes on (every batch skipped), a source below it marks again once it has been called
more than STALL_CALLS times, and more than twice as often as it ever was between two of
the better source's marks (outside stalls), with no such mark, unless a source ranked
above it that trains has been called since and has not stalled (a long accumulation
window's model calls are no stall while its backward passes keep pace): a leak in the
stalled loop still shows step by step. Model calls that train nothing (eval mode, or no grad) are a
validation pass between epochs, which adds no steps, unless it keeps more at each of
STALL_CALLS calls in a row (the memory allocated when each call begins: outputs gathered
on the device until the pass ends), or there are more of them than steps before them (a
generation phase after training; steps marked by any source count). A source that stands
in stops when any other marks (a validation pass between epochs of graph replays stands in
for that pass only); stopped by such a pass, its training calls stand in again at once, as
the source both stand in for has still not marked. gpumem.step() is never stood in for:
the program says where its steps are. Model calls that train before any backward pass has
run, once an optimizer has been built, are said to the library as a source of their own
(SOURCE_MODEL_CALL_AWAITING_BACKWARD): their graphs wait for a backward, so they may all be
one iteration (an episode, a sum of micro-batches' losses). With no optimizer built they
are plain model calls: nothing is going to take their graphs (an inference loop that left
out no_grad() and eval()), and what they keep grows step by step. Once an optimizer has
been built, the backward passes and training model calls before its first step are the
first accumulation window's micro-batches: they mark nothing, up to FIRST_WINDOW_PASSES
backward passes (an optimizer that skips every step: they mark after those), or until
gradients are zeroed (zero_grad of an optimizer or a module) before any optimizer step: the
passes then do not accumulate, and mark. The library is told when the window begins, and
stops looking for passes in the allocations.
"""
import functools
import importlib
import threading

from . import _native

# hooks/gpumem_trace.h: what marks the steps.
SOURCE_EXPLICIT = 1
SOURCE_OPTIMIZER_HOOK = 2
SOURCE_BACKWARD = 3
SOURCE_MODEL_CALL = 4
SOURCE_GRAPH_REPLAY = 5
# Said instead of SOURCE_MODEL_CALL for a mark at a call that trains before any backward
# pass has run: its graph waits for a backward to come, so the calls so far may all be
# one iteration (an episode, a sum of micro-batches' losses) rather than steps. Ranked as
# a model call.
SOURCE_MODEL_CALL_AWAITING_BACKWARD = 6
# Which sources silence which: a lower rank leads.
_RANK = {SOURCE_EXPLICIT: 0, SOURCE_OPTIMIZER_HOOK: 1, SOURCE_BACKWARD: 2,
         SOURCE_MODEL_CALL: 3, SOURCE_GRAPH_REPLAY: 4}
_LOOP_SOURCES = (SOURCE_BACKWARD, SOURCE_MODEL_CALL, SOURCE_GRAPH_REPLAY)
# A silenced source's calls with no better mark before it stands in for the stalled one:
# above gradient accumulation's few, well below the batches an OOM takes.
STALL_CALLS = 8
# Backward passes (and the model calls between them) while an optimizer has been built but
# none has stepped yet: the micro-batches of the first accumulation window, which mark
# nothing. Past this many, the optimizer is taken to skip every step (a GradScaler finding
# inf each time) and they mark.
FIRST_WINDOW_PASSES = 64


class LoopSource:
    """A backward pass, model call or graph replay source, counted since a better source
    last marked (all its calls, until one has), or, while it stands in, since another
    source marked. `steps_before` counts every step marked before its calls, whichever
    source marked them."""

    def __init__(self):
        self.most_between = 0   # the most trained calls between two better marks (calls
        #                         while standing in not counted: each stall judged alike)
        self.resumes = False    # stopped standing in by a pass that trains nothing (a
        #                         validation pass standing in for itself): the better
        #                         source is still stalled, so training calls stand in again
        #                         at once
        self.start_stretch(steps_before=0)

    def start_stretch(self, steps_before):
        self.calls = 0          # calls since a better mark
        self.idle = 0           # of them, those that trained nothing
        self.steps_before = steps_before  # steps marked before them
        self.standing_in = False
        self.last_allocated = None  # memory allocated at the last idle call's start
        self.rises = 0              # idle calls in a row that began with more than the last

    def marked_elsewhere(self, steps_before, by_idle_pass=False):
        """A source ranked above it marked, or any other while it stands in (a validation
        pass of model calls between epochs of graph replays stands in for that pass, not
        for the replays after it). `by_idle_pass`: the mark was a call that trains nothing
        standing in, so the source both stand in for has still not marked."""
        if not self.standing_in:
            self.most_between = max(self.most_between, self.calls - self.idle)
        self.resumes = by_idle_pass and (self.standing_in or self.resumes)
        self.start_stretch(steps_before)

    def called(self, training, allocated):
        self.calls += 1
        if training:
            return
        self.idle += 1
        now = allocated() if allocated is not None else None
        growing = now is not None and self.last_allocated is not None and now > self.last_allocated
        self.rises = self.rises + 1 if growing else 0
        self.last_allocated = now

    def stalled(self, training):
        """Whether the better source has stopped marking: called more than STALL_CALLS
        times, and more than twice the most between two of its marks; an idle call also
        needs its pass to keep more at each call, or to outnumber the steps before it."""
        if self.standing_in or (training and self.resumes):
            return True
        limit = max(STALL_CALLS, 2 * self.most_between)
        if training:
            return self.calls - self.idle > limit
        return self.calls > limit and (self.rises >= STALL_CALLS or
                                       self.calls > self.steps_before)


class Lead:
    """Of several things that each could mark an iteration (optimizers, CUDA graphs), the
    one that does: the first called; another called twice while the lead is not takes the
    lead (the lead was a finder's or a warm-up's)."""

    def __init__(self):
        self.key = None     # id() of the lead
        self.others = set()  # ids of the others called since the lead was

    def marks(self, key):
        """Whether the call of `key` marks: it leads, or has just taken the lead."""
        if self.key is None:
            self.key = key
        if key != self.key:
            if key not in self.others:
                self.others.add(key)
                return False
            self.key = key  # called twice without the lead: it leads now
        self.others.clear()
        return True


class StepMarker:
    def __init__(self, lib=None):
        self._lib = lib
        self.optimizers = Lead()
        self.explicit = False      # the program calls gpumem.step() itself
        self.hook_marks = 0
        self.count = 0             # steps marked so far (gpumem_step's count)
        self.source = None         # the source last said to the library
        self.backward_seen = False  # a backward pass has begun
        self.optimizer_built = False  # a torch.optim optimizer exists (watch_optimizers)
        self.window_passes = 0      # backward passes while it had not stepped
        self.steps_coming_said = False  # the library was told that steps will be marked
        self.window_closed = False  # gradients were zeroed in it: its passes are iterations
        self.leading_rank = len(_RANK)  # the best-ranked source that has marked
        self.loops = {source: LoopSource() for source in _LOOP_SOURCES}
        self.loop_thread = threading.local()  # .noted: the library has this thread's note

    def lib(self):
        return self._lib if self._lib is not None else _native.lib()

    def _mark(self, source, idle_pass=False, training=False):
        """`idle_pass`: a call that trains nothing marks, standing in. `training`: the
        call trains (a model call: said apart while no backward pass has run)."""
        self.leading_rank = min(self.leading_rank, _RANK[source])
        for other, loop in self.loops.items():
            if other == source:
                continue
            if _RANK[other] > _RANK[source] or loop.standing_in:
                loop.marked_elsewhere(self.count + 1, idle_pass)
            else:  # a better source, silenced: its stall is still judged, against all steps
                loop.steps_before = self.count + 1
        said = source
        if (source == SOURCE_MODEL_CALL and training and not self.backward_seen and
                self.optimizer_built):
            said = SOURCE_MODEL_CALL_AWAITING_BACKWARD
        if self.source != said:
            self._tell("gpumem_trace_step_source", said)
            self.source = said
        self.count = self.lib().gpumem_step()
        return self.count

    def note_loop_thread(self):
        """This thread runs the loop (it calls the model, runs backward or steps an
        optimizer): said to the library until its note is in the trace, so that its
        blocks are not taken for a helper thread's."""
        if not getattr(self.loop_thread, "noted", False):
            self.loop_thread.noted = self._tell("gpumem_trace_loop_thread") == 1

    def on_model_call_begins(self):
        """The first call of a model on the GPU begins: this thread runs the loop, and the
        steps will be marked here, so the library stops looking for passes (the model's
        identical layers would look like them) even if this call runs out of memory."""
        self.note_loop_thread()
        self._say_steps_coming()

    def on_optimizer_step(self, optimizer, *_):
        self.note_loop_thread()
        if self.explicit or not self.optimizers.marks(id(optimizer)):
            return
        self.hook_marks += 1
        self._mark(SOURCE_OPTIMIZER_HOOK)

    def silenced(self, source):
        """Whether a better-ranked source has marked: `source` marks only while that one
        stalls."""
        return self.leading_rank < _RANK[source]

    def on_loop_start(self, source, training=True, allocated=None):
        """A backward pass, a model call or a graph replay begins (_LOOP_SOURCES):
        from the second on, it ends the iteration before. `training`: the call trains (a
        model in train mode, with grad), which only model calls may not; `allocated`
        reads the memory allocated now, asked only at calls that train nothing while a
        better source leads."""
        self.note_loop_thread()
        if source == SOURCE_BACKWARD:
            self.backward_seen = True
            if self.optimizer_built and self.hook_marks == 0:
                self.window_passes += 1
        if self.explicit:
            return
        loop = self.loops[source]
        if self.in_first_window(source, training):
            loop.called(training, None)  # the window's length judges later stalls
            self._say_steps_coming()
            return
        if not self.silenced(source):
            loop.called(True, None)
            if loop.calls > 1:
                self._mark(source, training=training)
            return
        loop.called(training, allocated)
        if loop.stalled(training) and not self.deferred(source):
            loop.standing_in = True
            self._mark(source, idle_pass=not training, training=training)

    def _say_steps_coming(self):
        """Tells the library once that steps will be marked: it stops looking for passes,
        which the window's micro-batches or a model's layers would be taken for."""
        if self.steps_coming_said:
            return
        self.steps_coming_said = True
        self._tell("gpumem_trace_steps_coming")

    def _tell(self, name, *args):
        """Calls the library's hooks/gpumem_trace.h function `name`, where it has one
        (older builds lack some), and returns what it returns (None without one)."""
        return _native.call_optional(name, *args, library=self.lib())

    def on_optimizer_built(self):
        self.optimizer_built = True

    def on_zero_grad(self):
        """Gradients zeroed (an optimizer's or a module's zero_grad) after a backward pass
        and before any optimizer has stepped: the passes are not accumulating into one
        step, whatever the optimizer does (a GradScaler skipping every step, an update
        written by hand beside an optimizer built for its scheduler), so the first window
        ends and they mark."""
        if self.optimizer_built and self.hook_marks == 0 and self.window_passes > 0:
            self.window_closed = True

    def in_first_window(self, source, training):
        """Whether this call is a micro-batch of the first accumulation window: an
        optimizer was built and none has stepped, a backward pass has run, no gradients
        were zeroed since, and fewer than FIRST_WINDOW_PASSES of them so far. Calls that
        train nothing (a validation pass) and calls before any backward pass
        (SOURCE_MODEL_CALL_AWAITING_BACKWARD) are not."""
        if (not self.optimizer_built or self.hook_marks > 0 or not self.backward_seen or
                self.window_closed):
            return False
        return (source in (SOURCE_BACKWARD, SOURCE_MODEL_CALL) and training and
                self.window_passes <= FIRST_WINDOW_PASSES)

    def deferred(self, source):
        """Whether a better-ranked loop source, with calls that trained since the leader
        last marked, has not stalled: the leader has not stopped, or that source would
        stand in first. (The model calls of a long accumulation window are many between
        optimizer steps, and were few between the backward passes that marked the first
        window.)"""
        return any(_RANK[other] < _RANK[source] and loop.calls > loop.idle and
                   not loop.stalled(True) for other, loop in self.loops.items())

    def on_explicit_step(self):
        first = not self.explicit
        self.explicit = True
        if first and self.hook_marks > 0:
            return self.count  # the hooks marked this iteration already
        return self._mark(SOURCE_EXPLICIT)


_marker = StepMarker()


def marker():
    return _marker


def torch_submodule(torch, path):
    """torch.<path> ("optim.optimizer"), imported here if need be: gpumem installs right
    after `import torch`, and torch (2.11) has not imported torch.optim by then. None
    where it has no such module."""
    module = torch
    for part in path.split("."):
        module = getattr(module, part, None)
    name = getattr(torch, "__name__", None)
    if module is not None or not name:
        return module
    try:
        return importlib.import_module(name + "." + path)
    except ImportError:
        return None


def watch_optimizers(torch):
    """Registers the global optimizer step hook once (torch >= 2.0 has it), and notes when
    an optimizer is built (its base class's __init__, which every torch.optim optimizer
    and most others run)."""
    optimizer_module = torch_submodule(torch, "optim.optimizer")
    register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    if register is None or getattr(optimizer_module, "_gpumem_step_hook", False):
        return False
    register(_marker.on_optimizer_step)
    optimizer_module._gpumem_step_hook = True
    optimizer_class = getattr(optimizer_module, "Optimizer", None)
    _note_construction(optimizer_class)
    _note_after(optimizer_class, "zero_grad", _marker.on_zero_grad)
    _note_after(getattr(getattr(torch, "nn", None), "Module", None), "zero_grad",
                _marker.on_zero_grad)
    return True


def _note_construction(optimizer_class):
    _note_after(optimizer_class, "__init__", _optimizer_built, with_self=True)


def _optimizer_built(optimizer):
    """An optimizer whose class overrides zero_grad without calling the base class's (a
    fused one of apex or DeepSpeed) has its own noted too."""
    _marker.on_optimizer_built()
    _note_after(type(optimizer), "zero_grad", _marker.on_zero_grad)


def _note_after(cls, name, note, with_self=False):
    """Calls note() (note(self) `with_self`) after every call of cls.<name> (the class's
    own method, which its subclasses inherit), once however often it is asked."""
    method = getattr(cls, name, None) if isinstance(cls, type) else None
    if method is None or getattr(method, "_gpumem_noted", False):
        return

    @functools.wraps(method)
    def noted(self, *args, **kwargs):
        result = method(self, *args, **kwargs)
        if with_self:
            note(self)
        else:
            note()
        return result

    noted._gpumem_noted = True
    setattr(cls, name, noted)
