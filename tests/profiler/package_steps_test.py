"""The Python package's step marks and cap records, on a fake torch and a fake libgpumem:
one optimizer, several, GradScaler's skipped steps, a script that also calls gpumem.step(),
loops with no optimizer (backward passes) or no backward (model calls),
set_per_process_memory_fraction; and the package imports with no torch at all.

usage: package_steps_test.py PYTHON_DIR. Exits non-zero on failure.
"""
import copy
import gc
import importlib
import os
import pickle
import shutil
import sys
import tempfile
import threading
import types
import unittest

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else "python")
sys.modules["torch"] = None  # `import torch` fails: the package must not need it to import
import gpumem  # noqa: E402
from gpumem import _capacity, _graph_marks, _graph_pools, _loop_marks, _steps  # noqa: E402
del sys.modules["torch"]


class FakeLib:
    def __init__(self):
        self.steps = []      # the step source in force at each gpumem_step
        self.source = 0
        self.caps = []
        self.steps_coming = 0  # gpumem_trace_steps_coming calls
        self.loop_threads = []  # the threads that called gpumem_trace_loop_thread
        self.trace_open = True

    def gpumem_step(self):
        self.steps.append(self.source)
        return len(self.steps)

    def gpumem_trace_step_source(self, source):
        self.source = source
        return 0

    def gpumem_trace_steps_coming(self):
        self.steps_coming += 1

    def gpumem_trace_loop_thread(self):
        self.loop_threads.append(threading.get_ident())
        return 1 if self.trace_open else 0

    def gpumem_trace_capacity(self, device, nbytes, source):
        self.caps.append((device, nbytes, source))
        return 0


class Opt:
    pass


def fake_torch():
    hooks = []
    optimizer = types.SimpleNamespace(register_optimizer_step_post_hook=hooks.append)
    props = types.SimpleNamespace(total_memory=80 << 30)
    calls = []
    cuda = types.SimpleNamespace(
        set_per_process_memory_fraction=lambda f, d=None: calls.append((f, d)),
        get_device_properties=lambda d: props, current_device=lambda: 0, device_count=lambda: 2,
        is_initialized=lambda: True)
    cuda.memory = types.SimpleNamespace(
        set_per_process_memory_fraction=cuda.set_per_process_memory_fraction)
    torch = types.SimpleNamespace(optim=types.SimpleNamespace(optimizer=optimizer), cuda=cuda)
    return torch, hooks, calls


class StepMarks(unittest.TestCase):
    def setUp(self):
        self.lib = FakeLib()
        self.m = _steps.StepMarker(self.lib)

    def step(self, opt):
        self.m.on_optimizer_step(opt, (), {})

    def test_one_optimizer_marks_each_step(self):
        opt = Opt()
        for _ in range(5):
            self.step(opt)
        self.assertEqual(self.lib.steps, [_steps.SOURCE_OPTIMIZER_HOOK] * 5)

    def test_several_optimizers_make_one_step_per_iteration(self):
        d, g = Opt(), Opt()
        for _ in range(4):
            self.step(d)
            self.step(g)
        self.assertEqual(len(self.lib.steps), 4)

    def test_skipped_step_is_not_a_step(self):
        opt = Opt()
        for i in range(4):
            if i != 2:  # GradScaler skipped optimizer.step(): its hook did not fire
                self.step(opt)
        self.assertEqual(len(self.lib.steps), 3)

    def test_iteration_where_one_of_two_optimizers_skipped_still_counts(self):
        d, g = Opt(), Opt()
        for i in range(4):
            if i != 2:
                self.step(d)
            self.step(g)
        self.assertEqual(len(self.lib.steps), 4)

    def test_a_new_optimizer_takes_the_lead(self):
        finder, real = Opt(), Opt()
        self.step(finder)
        for _ in range(5):
            self.step(real)
        self.assertEqual(len(self.lib.steps), 1 + 4)

    def test_explicit_steps_are_not_counted_twice(self):
        opt = Opt()
        for _ in range(3):
            self.step(opt)
            self.m.on_explicit_step()
        self.assertEqual(len(self.lib.steps), 3)
        self.assertEqual(self.lib.steps[1:], [_steps.SOURCE_EXPLICIT] * 2)

    def test_explicit_only(self):
        for _ in range(3):
            self.m.on_explicit_step()
        self.assertEqual(self.lib.steps, [_steps.SOURCE_EXPLICIT] * 3)


BACKWARD, MODEL_CALL = _steps.SOURCE_BACKWARD, _steps.SOURCE_MODEL_CALL
OPTIMIZER = _steps.SOURCE_OPTIMIZER_HOOK
GRAPH_REPLAY = _steps.SOURCE_GRAPH_REPLAY
# A model call that trains before any backward pass has run (the fake modules below train:
# train mode, grad on).
AWAITING = _steps.SOURCE_MODEL_CALL_AWAITING_BACKWARD


class LoopMarks(unittest.TestCase):
    def setUp(self):
        self.lib = FakeLib()
        self.m = _steps.StepMarker(self.lib)

    def test_backward_passes_mark_from_the_second(self):
        for _ in range(4):
            self.m.on_loop_start(BACKWARD)
        self.assertEqual(self.lib.steps, [BACKWARD] * 3)

    def test_an_optimizer_stepping_in_the_first_iteration_leaves_them_unmarked(self):
        opt = Opt()
        for _ in range(5):
            self.m.on_loop_start(MODEL_CALL)
            self.m.on_loop_start(BACKWARD)
            self.m.on_optimizer_step(opt)
        self.assertEqual(self.lib.steps, [_steps.SOURCE_OPTIMIZER_HOOK] * 5)

    def test_accumulated_backward_passes_before_the_first_optimizer_step(self):
        opt = Opt()
        for _ in range(3):
            for _ in range(4):
                self.m.on_loop_start(BACKWARD)
            self.m.on_optimizer_step(opt)
        self.assertEqual(self.lib.steps, [BACKWARD] * 3 + [_steps.SOURCE_OPTIMIZER_HOOK] * 3)

    def test_backward_passes_silence_model_calls(self):
        for _ in range(3):  # an evaluation first
            self.m.on_loop_start(MODEL_CALL, training=False)
        for _ in range(3):  # then training by hand, no optimizer built
            self.m.on_loop_start(MODEL_CALL)
            self.m.on_loop_start(BACKWARD)
        self.assertEqual(self.lib.steps, [MODEL_CALL] * 4 + [BACKWARD] * 2)
        self.assertTrue(self.m.silenced(MODEL_CALL))
        self.assertFalse(self.m.silenced(BACKWARD))

    def test_explicit_steps_silence_them_for_good(self):
        self.m.on_explicit_step()
        for _ in range(3 * _steps.STALL_CALLS):
            self.m.on_loop_start(BACKWARD)
            self.m.on_loop_start(MODEL_CALL)
        self.assertEqual(self.lib.steps, [_steps.SOURCE_EXPLICIT])

    def test_model_calls_stand_in_while_the_optimizer_stalls(self):
        opt = Opt()
        self.train(5, opt)
        for _ in range(20):  # every batch skipped before its backward
            self.m.on_loop_start(MODEL_CALL)
        for _ in range(3):  # training again
            self.m.on_loop_start(MODEL_CALL)
            self.m.on_optimizer_step(opt)
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 5 + [MODEL_CALL] * (20 + 1 - 8) +
                         [OPTIMIZER] * 3)

    def test_backward_passes_stand_in_before_model_calls_when_both_go_on(self):
        opt = Opt()
        for _ in range(20):
            self.m.on_loop_start(MODEL_CALL)
            self.m.on_loop_start(BACKWARD)
            self.m.on_optimizer_step(opt)
        for _ in range(40):  # every step skipped (GradScaler finds inf each time)
            self.m.on_loop_start(MODEL_CALL)
            self.m.on_loop_start(BACKWARD)
        # the model call would trip first in the ninth iteration, but the backward pass,
        # ranked above it and not yet stalled, trips in the same iteration and leads
        self.assertEqual(self.lib.steps[20:], [BACKWARD] * 32)

    def test_accumulated_passes_between_optimizer_steps_are_no_stall(self):
        opt = Opt()
        self.train(10, opt, passes=8)
        self.assertEqual(self.lib.steps, [MODEL_CALL] + [BACKWARD] * 7 + [OPTIMIZER] * 10)

    def test_model_calls_of_long_accumulation_windows_are_no_stall(self):
        opt = Opt()
        # sixteen micro-batches a step: backward passes mark the first
        self.train(5, opt, passes=16)
        self.assertEqual(self.lib.steps, [MODEL_CALL] + [BACKWARD] * 15 + [OPTIMIZER] * 5)

    def test_each_thread_that_runs_the_loop_is_said_until_the_trace_has_it(self):
        self.lib.trace_open = False  # the trace opens with the first device
        self.m.on_loop_start(MODEL_CALL)
        self.lib.trace_open = True
        self.m.on_loop_start(BACKWARD)
        self.m.on_optimizer_step(Opt(), (), {})
        self.m.on_loop_start(MODEL_CALL)
        other = threading.Thread(target=self.m.on_loop_start, args=(MODEL_CALL,))
        other.start()
        other.join()
        main = threading.get_ident()
        self.assertEqual(self.lib.loop_threads, [main, main, other.ident])

    def test_the_first_accumulation_window_marks_nothing(self):
        opt = Opt()
        self.m.on_optimizer_built()
        # sixteen micro-batches a step, the optimizer built before
        self.train(5, opt, passes=16)
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 5)
        # said once, so that the library stops taking the micro-batches for passes
        self.assertEqual(self.lib.steps_coming, 1)

    def iterations(self, n, passes=1):
        """`n` iterations of `passes` forward and backward passes, gradients zeroed after
        each, and no optimizer step."""
        for _ in range(n):
            for _ in range(passes):
                self.m.on_loop_start(MODEL_CALL)
                self.m.on_loop_start(BACKWARD)
                self.m.on_zero_grad()

    def test_zeroing_gradients_before_any_step_ends_the_first_window(self):
        self.iterations(10)  # an update written by hand: no optimizer built
        by_hand = list(self.lib.steps)
        self.lib.steps.clear()
        self.m = _steps.StepMarker(self.lib)
        self.m.on_optimizer_built()  # one built all the same (a scheduler's), never stepped
        self.iterations(10)
        self.assertEqual(self.lib.steps, by_hand)
        self.assertEqual(len(by_hand), 10)

    def test_two_passes_an_iteration_each_zeroed_mark_each_pass(self):
        self.m.on_optimizer_built()  # each pass's gradients zeroed, no step() ever
        self.iterations(5, passes=2)
        self.assertEqual(self.lib.steps[-1], BACKWARD)
        self.assertEqual(self.lib.steps.count(BACKWARD), 9)  # every pass after the first

    def test_gradients_zeroed_only_after_a_step_leave_the_window_alone(self):
        opt = Opt()
        self.m.on_optimizer_built()
        self.m.on_zero_grad()  # before the first pass, as most loops begin
        self.train(1, opt, passes=16)
        self.m.on_zero_grad()
        self.assertEqual(self.lib.steps, [OPTIMIZER])

    def test_no_window_is_said_where_no_optimizer_was_built(self):
        for _ in range(20):  # updates by hand: the backward passes mark from the second
            self.m.on_loop_start(MODEL_CALL)
            self.m.on_loop_start(BACKWARD)
        self.assertEqual(self.lib.steps_coming, 0)
        self.assertEqual(self.lib.steps[-1], BACKWARD)

    def test_an_optimizer_that_never_steps_leaves_the_passes_after_the_first_window(self):
        self.m.on_optimizer_built()
        for _ in range(100):  # every step skipped from the first (GradScaler)
            self.m.on_loop_start(MODEL_CALL)
            self.m.on_loop_start(BACKWARD)
        # every pass after the first 64 marks
        self.assertEqual(self.lib.steps, [BACKWARD] * (100 - _steps.FIRST_WINDOW_PASSES))

    def test_calls_before_the_first_backward_pass_still_await_it(self):
        self.m.on_optimizer_built()
        for _ in range(4):  # an episode, then its update
            self.m.on_loop_start(MODEL_CALL)
        self.m.on_loop_start(BACKWARD)
        self.m.on_optimizer_step(Opt())
        self.assertEqual(self.lib.steps, [AWAITING] * 3 + [OPTIMIZER])

    def test_a_stall_is_judged_against_the_longest_gap_seen(self):
        opt = Opt()
        for gap in (1, 6, 1):  # six batches between two steps once
            for _ in range(gap):
                self.m.on_loop_start(MODEL_CALL)
                self.m.on_loop_start(BACKWARD)
            self.m.on_optimizer_step(opt)
        for _ in range(13):  # then a stall: more than 8, and more than twice six
            self.m.on_loop_start(MODEL_CALL)
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 3 + [MODEL_CALL])

    def test_every_stall_is_judged_alike(self):
        opt = Opt()
        self.train(1, opt)
        for _ in range(3):  # an evaluation of 12 batches after each step
            for _ in range(12):
                self.m.on_loop_start(MODEL_CALL)
            self.m.on_optimizer_step(opt)
        self.assertEqual(self.lib.steps, [OPTIMIZER] + ([MODEL_CALL] * 4 + [OPTIMIZER]) * 3)

    def train(self, steps, opt, passes=1):
        """`steps` optimizer steps of `opt`, each after `passes` forward and backward passes
        (micro-batches)."""
        for _ in range(steps):
            for _ in range(passes):
                self.m.on_loop_start(MODEL_CALL)
                self.m.on_loop_start(BACKWARD)
            self.m.on_optimizer_step(opt)

    def test_a_validation_pass_is_no_stall(self):
        opt = Opt()
        for _ in range(3):  # an epoch of training, then 50 batches evaluated
            self.train(60, opt)
            for _ in range(50):
                self.m.on_loop_start(MODEL_CALL, training=False)
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 180)
        self.train(1, opt)  # the validation passes did not widen the gap between steps
        for _ in range(20):
            self.m.on_loop_start(MODEL_CALL)
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 181 + [MODEL_CALL] * 12)

    def test_a_validation_pass_that_keeps_more_at_each_call_is_stood_in_for(self):
        opt = Opt()
        self.train(60, opt)
        kept = iter(range(100, 200))  # outputs gathered on the device
        for _ in range(30):
            self.m.on_loop_start(MODEL_CALL, False, lambda: next(kept))
        # the first call has nothing to rise from; the ninth is the eighth rise in a row
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 60 + [MODEL_CALL] * (30 - 8))

    def test_a_validation_pass_that_keeps_nothing_is_no_stall(self):
        opt = Opt()
        self.train(60, opt)
        lengths = [5, 6, 7, 8, 9, 10, 11, 12] * 5  # 7 longer batches in a row at most
        for n in lengths:
            self.m.on_loop_start(MODEL_CALL, False, lambda: 100 + n)
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 60)

    def test_a_phase_longer_than_the_training_before_it_is_stood_in_for(self):
        opt = Opt()
        self.train(30, opt)
        for _ in range(40):  # generation after training
            self.m.on_loop_start(MODEL_CALL, training=False)
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 30 + [MODEL_CALL] * 10)

    def test_calls_that_train_before_the_first_backward_pass_await_it(self):
        opt = Opt()
        self.m.on_optimizer_built()
        for _ in range(3):  # episodes of 5 actions, each a call of the policy
            for _ in range(5):
                self.m.on_loop_start(MODEL_CALL)
            self.m.on_loop_start(BACKWARD)
            self.m.on_optimizer_step(opt)
        self.assertEqual(self.lib.steps, [AWAITING] * 4 + [OPTIMIZER] * 3)
        self.assertEqual(self.lib.source, OPTIMIZER)

    def test_calls_with_grad_and_no_optimizer_are_plain_model_calls(self):
        for _ in range(4):  # predictions kept, no_grad() and eval() left out
            self.m.on_loop_start(MODEL_CALL)
        self.assertEqual(self.lib.steps, [MODEL_CALL] * 3)
        self.m.on_optimizer_built()  # built later: calls before a backward await it again
        self.m.on_loop_start(MODEL_CALL)
        self.assertEqual(self.lib.steps[-1], AWAITING)

    def test_an_evaluation_script_marks_at_its_calls_that_train_nothing(self):
        for _ in range(4):
            self.m.on_loop_start(MODEL_CALL, training=False)
        self.assertEqual(self.lib.steps, [MODEL_CALL] * 3)


class GraphReplayMarks(unittest.TestCase):
    def setUp(self):
        self.lib = FakeLib()
        self.m = _steps.StepMarker(self.lib)
        self.calls = []
        calls = self.calls

        class CUDAGraph:
            def replay(self):
                calls.append(self)

        self.graph_class = CUDAGraph
        self.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
            graphs=types.SimpleNamespace(CUDAGraph=CUDAGraph)))
        self.assertTrue(_graph_marks.watch_graph_replays(self.torch, self.m))

    def test_wraps_replay_once_and_still_replays(self):
        self.assertFalse(_graph_marks.watch_graph_replays(self.torch, self.m))
        g = self.graph_class()
        g.replay()
        self.assertEqual(self.calls, [g])

    def test_a_loop_of_replays_alone_marks_from_the_second(self):
        g = self.graph_class()
        for _ in range(5):
            g.replay()
        self.assertEqual(self.lib.steps, [GRAPH_REPLAY] * 4)

    def captured_after_warm_up(self):
        """A graph whose step was captured after three warm-up optimizer steps (four
        optimizer marks in all)."""
        opt = Opt()
        for _ in range(4):
            self.m.on_optimizer_step(opt, (), {})
        return self.graph_class()

    def test_a_step_captured_after_warm_up_is_stood_in_for_once_the_optimizer_stops(self):
        g = self.captured_after_warm_up()
        for _ in range(30):
            g.replay()
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 4 + [GRAPH_REPLAY] * (30 - 8))

    def test_validation_between_graphed_epochs_adds_no_steps(self):
        # Epochs of replays, each followed by a validation pass of eager model calls that
        # keeps nothing.
        g = self.captured_after_warm_up()
        for _ in range(3):
            for _ in range(50):
                g.replay()
            for _ in range(20):
                self.m.on_loop_start(MODEL_CALL, False, lambda: 100)
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 4 + [GRAPH_REPLAY] * (150 - 8))

    def test_a_validation_pass_that_gathers_between_graphed_epochs_stands_in_for_itself(self):
        g = self.captured_after_warm_up()
        for _ in range(50):
            g.replay()
        kept = iter(range(100, 200))  # outputs gathered on the device
        for _ in range(20):
            self.m.on_loop_start(MODEL_CALL, False, lambda: next(kept))
        for _ in range(50):
            g.replay()
        # The replays after it stand in again at once: the optimizer is still stalled.
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 4 + [GRAPH_REPLAY] * 42 +
                         [MODEL_CALL] * 12 + [GRAPH_REPLAY] * 50)

    def test_an_optimizer_stepping_each_iteration_keeps_the_lead(self):
        opt, fwd, bwd = Opt(), self.graph_class(), self.graph_class()
        for _ in range(30):  # make_graphed_callables: two graphs and an optimizer step
            fwd.replay()
            bwd.replay()
            self.m.on_optimizer_step(opt, (), {})
        self.assertEqual(self.lib.steps, [OPTIMIZER] * 30)

    def test_other_graphs_replayed_within_an_iteration_add_no_steps(self):
        fwd, bwd = self.graph_class(), self.graph_class()
        for _ in range(5):
            fwd.replay()
            bwd.replay()
        self.assertEqual(self.lib.steps, [GRAPH_REPLAY] * 4)

    def test_a_graph_replayed_twice_without_the_lead_takes_it(self):
        warm_up, g = self.graph_class(), self.graph_class()
        warm_up.replay()
        for _ in range(5):
            g.replay()  # the first is no mark, the second takes the lead and marks
        self.assertEqual(self.lib.steps, [GRAPH_REPLAY] * 4)


class Handle:
    def __init__(self, table, key):
        self.table, self.key = table, key

    def remove(self):
        self.table.pop(self.key, None)


def register_in(table):
    def register(hook, **_):
        key = object()
        table[key] = hook
        return Handle(table, key)
    return register


class FakeModule:
    """Calls its hooks the way torch.nn.Module._call_impl does (global ones first)."""
    pre, post = {}, {}  # the global hooks

    def __init__(self, device=None, children=(), index=None):
        self.params = [types.SimpleNamespace(device=types.SimpleNamespace(type=device,
                                                                          index=index))] \
            if device else []
        self.children, self.own_pre = children, {}
        self._forward_pre_hooks = self.own_pre
        self.register_forward_pre_hook = register_in(self.own_pre)

    def modules(self):
        yield self
        for child in self.children:
            yield from child.modules()

    def parameters(self):
        return iter(self.params + [p for c in self.children for p in c.parameters()])

    def __call__(self):
        for hook in (*FakeModule.pre.values(), *self.own_pre.values()):
            hook(self, ())
        for child in self.children:
            child()
        for hook in tuple(FakeModule.post.values()):
            hook(self, (), None)


def torch_with_modules(compiling=lambda: False):
    FakeModule.pre, FakeModule.post = {}, {}
    module = types.SimpleNamespace(register_module_forward_pre_hook=register_in(FakeModule.pre),
                                   register_module_forward_hook=register_in(FakeModule.post))
    return types.SimpleNamespace(nn=types.SimpleNamespace(modules=types.SimpleNamespace(
        module=module)), compiler=types.SimpleNamespace(is_compiling=compiling))


class ModelCallHooks(unittest.TestCase):
    """The fake models train (train mode, grad on), an optimizer has been built and no
    backward pass runs: their calls mark as calls awaiting the first backward pass."""

    def setUp(self):
        self.lib = FakeLib()
        self.m = _steps.StepMarker(self.lib)
        self.m.on_optimizer_built()

    def test_the_model_is_found_and_marks_from_its_second_call(self):
        torch = torch_with_modules()
        self.assertTrue(_loop_marks.watch_model_calls(torch, self.m))
        self.assertFalse(_loop_marks.watch_model_calls(torch, self.m))
        transform, loss = FakeModule(), FakeModule()
        model = FakeModule(children=[FakeModule("cuda"), FakeModule("cuda")])
        for _ in range(4):
            transform()
            model()
            loss()
        self.assertEqual(self.lib.steps, [AWAITING] * 3)
        self.assertEqual((FakeModule.pre, FakeModule.post), ({}, {}))  # found: removed

    def test_a_freed_model_is_followed_by_the_next(self):
        _loop_marks.watch_model_calls(torch_with_modules(), self.m)
        finder_model = FakeModule("cuda")  # a batch-size finder's, say
        for _ in range(2):
            finder_model()
        del finder_model
        gc.collect()
        model = FakeModule("cuda")
        for _ in range(2):
            model()
        # the finder's second call, the model's first (found: it ends the finder's
        # iteration) and the model's second
        self.assertEqual(self.lib.steps, [AWAITING] * 3)
        self.assertEqual((FakeModule.pre, FakeModule.post), ({}, {}))

    def test_replicas_called_on_threads_are_not_taken(self):
        _loop_marks.watch_model_calls(torch_with_modules(), self.m)
        replicas = [FakeModule("cuda", index=i) for i in range(2)]

        class DataParallel(FakeModule):  # calls its replicas on threads of its own
            def __call__(self):
                for hook in (*FakeModule.pre.values(), *self.own_pre.values()):
                    hook(self, ())
                threads = [threading.Thread(target=r) for r in replicas]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                for hook in tuple(FakeModule.post.values()):
                    hook(self, (), None)

        parallel = DataParallel("cuda", index=0)
        for _ in range(3):
            parallel()
        self.assertEqual(len(parallel.own_pre), 1)
        self.assertEqual([len(r.own_pre) for r in replicas], [0, 0])
        self.assertEqual(self.lib.steps, [AWAITING] * 2)

    def test_the_first_call_of_a_model_on_the_gpu_says_steps_are_coming_as_it_begins(self):
        _loop_marks.watch_model_calls(torch_with_modules(), self.m)
        seen = []  # what the library had been told when the model's layer ran

        class Layer(FakeModule):
            def __call__(inner):
                seen.append((self.lib.steps_coming, list(self.lib.loop_threads)))
                super().__call__()

        transform, model = FakeModule("cpu"), FakeModule("cuda", children=[Layer()])
        transform()
        self.assertEqual(self.lib.steps_coming, 0)  # a module on the host says nothing
        for _ in range(2):
            model()
        # said before its layers ran (a first call that runs out of memory still said it)
        self.assertEqual(seen[0], (1, [threading.get_ident()]))
        self.assertEqual(self.lib.steps_coming, 1)

    def test_data_parallel_replica_threads_are_the_loops(self):
        torch = torch_with_modules()
        replicas = [FakeModule("cuda", index=i) for i in range(2)]
        ran_on = []

        class DataParallel(FakeModule):
            def parallel_apply(self, replicas, inputs):
                def run(replica):
                    ran_on.append(threading.get_ident())
                    replica()
                threads = [threading.Thread(target=run, args=(r,)) for r in replicas]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                return inputs

        torch.nn.DataParallel = DataParallel
        _loop_marks.watch_model_calls(torch, self.m)
        self.assertFalse(_loop_marks.watch_data_parallel(torch, self.m))  # once
        parallel = DataParallel("cuda", index=0)
        self.assertEqual(parallel.parallel_apply(replicas, "inputs"), "inputs")
        self.assertEqual(sorted(self.lib.loop_threads), sorted(ran_on))
        noting = [h for h in FakeModule.pre.values() if getattr(h, "__name__", "") == "note"]
        self.assertEqual(noting, [])  # the noting hook went with the call

    def test_a_model_on_the_host_is_not_taken(self):
        _loop_marks.watch_model_calls(torch_with_modules(), self.m)
        on_host, on_device = FakeModule("cpu"), FakeModule("cuda")
        for _ in range(3):
            on_host()
            on_device()
        self.assertEqual(self.lib.steps, [AWAITING] * 2)

    def test_an_optimizing_loop_leaves_the_model_hook_silent(self):
        _loop_marks.watch_model_calls(torch_with_modules(), self.m)
        model, opt = FakeModule("cuda"), Opt()
        for _ in range(3):
            model()
            self.m.on_optimizer_step(opt)
        self.assertEqual(len(model.own_pre), 1)
        self.assertEqual(self.lib.steps, [_steps.SOURCE_OPTIMIZER_HOOK] * 3)

    def test_calls_in_eval_mode_or_without_grad_train_nothing(self):
        grad, asked = [True], []
        torch = torch_with_modules()
        torch.is_grad_enabled = lambda: grad[0]
        torch.cuda = types.SimpleNamespace(memory_allocated=lambda d: asked.append(d) or 5)
        _loop_marks.watch_model_calls(torch, self.m)
        model, opt = FakeModule("cuda", index=1), Opt()
        model()
        self.m.on_optimizer_step(opt)
        seen = []
        self.m.on_loop_start = lambda source, training, allocated: seen.append(
            (training, allocated()))
        model()
        model.training = False
        model()
        model.training, grad[0] = True, False
        model()
        self.assertEqual(seen, [(True, 5), (False, 5), (False, 5)])
        self.assertEqual(asked, [1, 1, 1])  # the model's device

    def test_nothing_while_compiling(self):
        _loop_marks.watch_model_calls(torch_with_modules(compiling=lambda: True), self.m)
        model = FakeModule("cuda")
        for _ in range(3):
            model()
        self.assertEqual(self.lib.steps, [])


class ModelCallHookCopies(unittest.TestCase):
    """What copying, saving and scripting a model make of gpumem's hook on it."""

    def setUp(self):
        self.lib = FakeLib()
        self.m = _steps.StepMarker(self.lib)
        self.m.on_optimizer_built()  # the calls await a backward pass, as in training
        _loop_marks.watch_model_calls(torch_with_modules(), self.m)
        self.model = FakeModule("cuda")
        for _ in range(3):
            self.model()
        (self.hook,) = self.model.own_pre.values()

    def test_copies_and_pickles_do_nothing_and_need_no_gpumem(self):
        for copied in (copy.deepcopy(self.hook), pickle.loads(pickle.dumps(self.hook))):
            self.assertNotIsInstance(copied, _loop_marks.ModelCallHook)
            args = ("x",)
            self.assertIs(copied(self.model, args), args)  # the call's args, unchanged
        self.assertNotIn(b"gpumem", pickle.dumps(self.hook))

    def test_only_the_model_it_was_put_on_marks(self):
        other = FakeModule("cuda")
        other.own_pre.update(self.model.own_pre)  # a shallow copy shares the hooks
        other()
        self.assertEqual(self.lib.steps, [AWAITING] * 2)
        self.model()
        self.assertEqual(self.lib.steps, [AWAITING] * 3)

    def test_scripting_takes_the_hook_off(self):
        scripted = []
        recursive = types.SimpleNamespace(
            create_script_module=lambda module, stubs: scripted.append(
                [dict(m.own_pre) for m in module.modules()]))
        torch = types.SimpleNamespace(jit=types.SimpleNamespace(_recursive=recursive))
        self.assertTrue(_loop_marks.watch_script(torch))
        self.assertFalse(_loop_marks.watch_script(torch))
        parent = FakeModule(children=[self.model])
        recursive.create_script_module(parent, None)
        self.assertEqual(scripted, [[{}, {}]])  # off before it compiles
        self.assertEqual(self.model.own_pre, {})

    def test_graphing_takes_the_hook_and_its_copies_off(self):
        """make_graphed_callables asserts that the modules it is given have no hooks."""
        seen = []

        def make_graphed_callables(callables, sample_args):
            for c in (callables if isinstance(callables, tuple) else (callables,)):
                seen.append(dict(getattr(c, "own_pre", {})))
            return callables

        graphs = types.SimpleNamespace(make_graphed_callables=make_graphed_callables)
        torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
            graphs=graphs, make_graphed_callables=make_graphed_callables))
        self.assertTrue(_loop_marks.watch_graphed_callables(torch))
        self.assertFalse(_loop_marks.watch_graphed_callables(torch))
        self.assertIs(torch.cuda.make_graphed_callables, graphs.make_graphed_callables)
        copied = FakeModule("cuda")
        copied.own_pre.update({7: copy.deepcopy(self.hook)})
        user_hook = lambda module, args: None
        copied.own_pre[8] = user_hook
        torch.cuda.make_graphed_callables((self.model, copied, len), ())
        self.assertEqual(seen, [{}, {8: user_hook}, {}])  # a function passes as it is
        self.assertEqual(self.model.own_pre, {})


class BackwardHooks(unittest.TestCase):
    def setUp(self):
        self.lib = FakeLib()
        self.m = _steps.StepMarker(self.lib)
        self.calls = []
        autograd = types.SimpleNamespace()

        def backward(*args, inner=False):
            self.calls.append(args)
            if not inner:  # a reentrant checkpoint's backward, from inside this one
                autograd.backward("recomputed", inner=True)
        autograd.backward = backward
        self.compiling = False
        self.torch = types.SimpleNamespace(
            autograd=autograd, compiler=types.SimpleNamespace(is_compiling=lambda: self.compiling))

    def test_outermost_passes_mark_from_the_second(self):
        self.assertTrue(_loop_marks.watch_backward(self.torch, self.m))
        self.assertFalse(_loop_marks.watch_backward(self.torch, self.m))
        for i in range(3):
            self.torch.autograd.backward(i)
        self.assertEqual(len(self.calls), 6)
        self.assertEqual(self.lib.steps, [BACKWARD] * 2)

    def test_nothing_while_compiling(self):
        _loop_marks.watch_backward(self.torch, self.m)
        self.compiling = True
        for i in range(3):
            self.torch.autograd.backward(i)
        self.assertEqual(self.lib.steps, [])


class Hooks(unittest.TestCase):
    def test_registers_once(self):
        torch, hooks, _ = fake_torch()
        self.assertTrue(_steps.watch_optimizers(torch))
        self.assertFalse(_steps.watch_optimizers(torch))
        self.assertEqual(len(hooks), 1)

    def test_imports_optim_that_torch_has_not_imported_yet(self):
        # torch imports torch.optim lazily: right after `import torch`, when gpumem
        # installs, the attribute is not there yet.
        root = tempfile.mkdtemp()
        package = os.path.join(root, "lazytorch")
        os.makedirs(os.path.join(package, "optim"))
        open(os.path.join(package, "__init__.py"), "w").close()
        open(os.path.join(package, "optim", "__init__.py"), "w").close()
        with open(os.path.join(package, "optim", "optimizer.py"), "w") as f:
            f.write("hooks = []\nregister_optimizer_step_post_hook = hooks.append\n")
        sys.path.insert(0, root)
        try:
            torch = importlib.import_module("lazytorch")
            self.assertFalse(hasattr(torch, "optim"))
            self.assertTrue(_steps.watch_optimizers(torch))
            self.assertEqual(len(sys.modules["lazytorch.optim.optimizer"].hooks), 1)
        finally:
            sys.path.remove(root)
            shutil.rmtree(root)

    def test_building_an_optimizer_is_noted_once(self):
        class Optimizer:
            def __init__(self, params):
                self.params = params

        class SGD(Optimizer):
            def __init__(self, params, lr):
                super().__init__(params)
                self.lr = lr

        torch, _, _ = fake_torch()
        torch.optim.optimizer.Optimizer = Optimizer
        marker = _steps.marker()
        self.assertTrue(_steps.watch_optimizers(torch))
        self.assertFalse(hasattr(Optimizer, "zero_grad"))  # none to wrap: none made
        _steps._note_construction(Optimizer)  # a second watch wraps nothing more
        try:
            self.assertFalse(marker.optimizer_built)
            opt = SGD([1], lr=0.1)
            self.assertTrue(marker.optimizer_built)
            self.assertEqual((opt.params, opt.lr), ([1], 0.1))
            self.assertEqual(Optimizer.__init__.__wrapped__.__name__, "__init__")
            self.assertFalse(hasattr(Optimizer.__init__.__wrapped__, "__wrapped__"))
        finally:
            marker.optimizer_built = False

    def test_zeroing_gradients_is_noted_for_optimizers_and_modules(self):
        class Optimizer:
            def zero_grad(self, set_to_none=True):
                return set_to_none

        class Module:
            def zero_grad(self, set_to_none=True):
                return "module"

        torch, _, _ = fake_torch()
        torch.optim.optimizer.Optimizer = Optimizer
        torch.nn = types.SimpleNamespace(Module=Module)
        marker = _steps.marker()
        saved = (marker.optimizer_built, marker.window_passes, marker.window_closed)
        self.assertTrue(_steps.watch_optimizers(torch))
        _steps._note_after(Module, "zero_grad", marker.on_zero_grad)  # wrapped once only
        try:
            marker.optimizer_built, marker.window_passes = True, 1
            self.assertEqual(Module().zero_grad(), "module")
            self.assertTrue(marker.window_closed)
            marker.window_closed = False
            self.assertFalse(Optimizer().zero_grad(set_to_none=False))
            self.assertTrue(marker.window_closed)
            self.assertFalse(hasattr(Module.zero_grad.__wrapped__, "__wrapped__"))
        finally:
            marker.optimizer_built, marker.window_passes, marker.window_closed = saved

    def test_an_optimizer_that_overrides_zero_grad_is_noted_once_built(self):
        class Optimizer:
            def __init__(self):
                self.zeroed = 0

            def zero_grad(self):
                self.zeroed += 1

        class Fused(Optimizer):  # zero_grad of its own, never calling the base class's
            def zero_grad(self):
                self.zeroed += 10

        torch, _, _ = fake_torch()
        torch.optim.optimizer.Optimizer = Optimizer
        marker = _steps.marker()
        saved = (marker.optimizer_built, marker.window_passes, marker.window_closed)
        self.assertTrue(_steps.watch_optimizers(torch))
        try:
            marker.window_passes = 1
            fused = Fused()
            self.assertTrue(marker.optimizer_built)
            fused.zero_grad()
            self.assertEqual(fused.zeroed, 10)
            self.assertTrue(marker.window_closed)
            Fused()  # its class is noted once
            self.assertFalse(hasattr(Fused.zero_grad.__wrapped__, "__wrapped__"))
        finally:
            marker.optimizer_built, marker.window_passes, marker.window_closed = saved

    def test_old_torch_without_hooks(self):
        self.assertFalse(_steps.watch_optimizers(types.SimpleNamespace()))


class Capacity(unittest.TestCase):
    def test_memory_fraction_is_recorded(self):
        torch, _, calls = fake_torch()
        lib = FakeLib()
        self.assertTrue(_capacity.watch_memory_fraction(torch, lib))
        self.assertFalse(_capacity.watch_memory_fraction(torch, lib))
        torch.cuda.set_per_process_memory_fraction(0.5)
        torch.cuda.memory.set_per_process_memory_fraction(0.25, 1)
        self.assertEqual(calls, [(0.5, None), (0.25, 1)])
        self.assertEqual(lib.caps, [(0, 40 << 30, _capacity.SOURCE_MEMORY_FRACTION),
                                    (1, 20 << 30, _capacity.SOURCE_MEMORY_FRACTION)])

    def test_device_totals(self):
        torch, _, _ = fake_torch()
        lib = FakeLib()
        _capacity.record_device_totals(torch, lib)
        self.assertEqual(lib.caps, [(0, 80 << 30, 1), (1, 80 << 30, 1)])


class GraphPoolNotes(unittest.TestCase):
    """A pool's captures begin and end, and it is released with the last graph that used it
    (reset or collected): graphs kept in a dict, recaptured, sharing a pool. As PyTorch
    does, a graph names its pool only once its capture has ended."""

    def setUp(self):
        self.notes = []
        counter = iter(range(1, 1000))

        class CUDAGraph:
            def capture_begin(self, pool=None, capture_error_mode="global"):
                self.id, self.ended = pool or (0, next(counter)), False

            def capture_end(self):
                self.ended = True

            def reset(self):
                pass

            def pool(self):
                if not self.ended:
                    raise RuntimeError("Called CUDAGraph::pool() without a preceding "
                                       "successful capture.")
                return self.id

        self.graph_class = CUDAGraph
        cuda = types.SimpleNamespace(graphs=types.SimpleNamespace(CUDAGraph=CUDAGraph),
                                     current_device=lambda: 1)
        self.torch = types.SimpleNamespace(cuda=cuda)
        note = lambda device, change, pool: self.notes.append((device, change, pool))
        self.assertTrue(_graph_pools.watch_graph_pools(self.torch, note))
        self.assertFalse(_graph_pools.watch_graph_pools(self.torch, note))

    def capture(self, *pool):
        g = self.graph_class()
        g.capture_begin(*pool)
        g.capture_end()
        return g

    def test_kept_graphs_keep_their_pools_and_collected_ones_release_them(self):
        kept = {epoch: self.capture() for epoch in range(2)}
        self.capture()  # dropped at once
        gc.collect()
        B, E, R = _graph_pools.CAPTURE_BEGINS, _graph_pools.CAPTURE_ENDS, _graph_pools.RELEASED
        new = _graph_pools.NEW_POOL
        self.assertEqual(self.notes, [(1, B, new), (1, E, (0, 1)), (1, B, new), (1, E, (0, 2)),
                                      (1, B, new), (1, E, (0, 3)), (1, R, (0, 3))])
        self.assertEqual(len(kept), 2)

    def test_a_shared_pool_is_named_at_its_begin_and_released_with_its_last_graph(self):
        fwd = self.capture()
        bwd = self.capture(fwd.pool())
        self.assertEqual(self.notes[2], (1, _graph_pools.CAPTURE_BEGINS, (0, 1)))
        del fwd
        gc.collect()
        self.assertNotIn(_graph_pools.RELEASED, [c for _, c, _ in self.notes])
        bwd.reset()
        self.assertEqual(self.notes[-1], (1, _graph_pools.RELEASED, (0, 1)))
        del bwd
        gc.collect()
        self.assertEqual([c for _, c, _ in self.notes].count(_graph_pools.RELEASED), 1)

    def test_a_graph_captured_again_leaves_its_old_pool(self):
        g = self.capture()
        g.capture_begin()
        self.assertEqual(self.notes[-2:], [(1, _graph_pools.RELEASED, (0, 1)),
                                           (1, _graph_pools.CAPTURE_BEGINS, _graph_pools.NEW_POOL)])

    def test_a_failed_capture_ends_unnamed_and_keeps_nothing(self):
        g = self.graph_class()
        g.capture_begin()
        g.ended = None  # pool() refuses: the capture failed
        g.pool = lambda: (_ for _ in ()).throw(RuntimeError("capture failed"))
        g.capture_end()
        del g
        gc.collect()
        self.assertEqual([n[2] for n in self.notes], [_graph_pools.NEW_POOL] * 2)

    def test_a_note_that_fails_does_not_break_the_capture(self):
        def failing(*_):
            raise OSError("no trace")
        pools = _graph_pools.GraphPools(failing)
        pools.capture_begins(object(), 0)
        pools.dropped(12345)


if __name__ == "__main__":
    unittest.main()
