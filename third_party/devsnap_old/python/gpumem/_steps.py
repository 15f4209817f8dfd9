"""Step marks with no code change: a step ends at each optimizer step, seen through
PyTorch's global optimizer step hooks (both modes). Loops that no torch.optim optimizer
steps are marked by their backward passes, and loops with no backward (an evaluation
script) by the calls of their model (_loop_marks.py).

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
calls. Once one has marked, those below it mark nothing while it keeps marking. A backward
pass or a model call marks at its start, from the second on: it ends the iteration before.
So in a loop with an optimizer, which steps at the end of the first iteration, they never
mark. If the optimizer stops stepping while the loop goes on (every batch skipped), a source
below it marks again once it has been called more than STALL_CALLS times, and more than
twice as often as it ever was between two of the better source's marks (outside stalls),
with no such mark: a leak in the stalled loop still shows step by step. Model calls that
train nothing (eval mode, or no grad) are an evaluation between epochs until there are
more of them than steps so far: only a phase longer than the training before it (a
generation run after training) is stood in for, so a validation pass adds no steps. gpumem.step() is never stood in for: the program says where its steps are.
"""
import importlib

from . import _native

# hooks/gpumem_trace.h: what marks the steps.
SOURCE_EXPLICIT = 1
SOURCE_OPTIMIZER_HOOK = 2
SOURCE_BACKWARD = 3
SOURCE_MODEL_CALL = 4
# Which sources silence which: a lower rank leads.
_RANK = {SOURCE_EXPLICIT: 0, SOURCE_OPTIMIZER_HOOK: 1, SOURCE_BACKWARD: 2,
         SOURCE_MODEL_CALL: 3}
_LOOP_SOURCES = (SOURCE_BACKWARD, SOURCE_MODEL_CALL)
# A silenced source's calls with no better mark before it stands in for the stalled one:
# above gradient accumulation's few, well below the batches an OOM takes.
STALL_CALLS = 8


class StepMarker:
    def __init__(self, lib=None):
        self._lib = lib
        self.lead = None           # id() of the lead optimizer
        self.since_mark = set()    # ids of other optimizers stepped since the last mark
        self.explicit = False      # the program calls gpumem.step() itself
        self.hook_marks = 0
        self.count = 0             # steps marked so far (gpumem_step's count)
        self.source = None
        self.leading_rank = len(_RANK)  # the best-ranked source that has marked
        # Per loop source: its calls since a better source last marked (all its calls,
        # until one has), of them those that trained nothing while silenced, the steps
        # marked before them, the most there ever were between two such marks (stretches
        # it stood in for and idle calls not counted: each stall is judged alike), and
        # whether it stands in now.
        self.calls_since_better = dict.fromkeys(_LOOP_SOURCES, 0)
        self.idle_since_better = dict.fromkeys(_LOOP_SOURCES, 0)
        self.steps_before = dict.fromkeys(_LOOP_SOURCES, 0)
        self.most_between_better = dict.fromkeys(_LOOP_SOURCES, 0)
        self.standing_in = dict.fromkeys(_LOOP_SOURCES, False)

    def lib(self):
        return self._lib if self._lib is not None else _native.lib()

    def _mark(self, source):
        self.leading_rank = min(self.leading_rank, _RANK[source])
        for below in _LOOP_SOURCES:
            if _RANK[below] > _RANK[source]:
                if not self.standing_in[below]:
                    trained = self.calls_since_better[below] - self.idle_since_better[below]
                    self.most_between_better[below] = max(self.most_between_better[below],
                                                          trained)
                self.calls_since_better[below] = self.idle_since_better[below] = 0
                self.steps_before[below] = self.count + 1
                self.standing_in[below] = False
        if self.source != source:
            fn = getattr(self.lib(), "gpumem_trace_step_source", None)
            if fn is not None:
                fn(source)
            self.source = source
        self.count = self.lib().gpumem_step()
        return self.count

    def on_optimizer_step(self, optimizer, *_):
        if self.explicit:
            return
        key = id(optimizer)
        if self.lead is None:
            self.lead = key
        if key != self.lead:
            if key not in self.since_mark:
                self.since_mark.add(key)
                return
            self.lead = key  # stepped twice without the lead: it leads now
        self.since_mark.clear()
        self.hook_marks += 1
        self._mark(SOURCE_OPTIMIZER_HOOK)

    def silenced(self, source):
        """Whether a better-ranked source has marked: `source` marks only while that one
        stalls."""
        return self.leading_rank < _RANK[source]

    def stalled_above(self, source, training):
        """Whether `source` has been called so often since a better source last marked
        that the better one has stopped marking."""
        calls = self.calls_since_better[source]
        limit = max(STALL_CALLS, 2 * self.most_between_better[source])
        if not training:
            return calls > max(limit, self.steps_before[source])
        return calls - self.idle_since_better[source] > limit

    def on_loop_start(self, source, training=True):
        """A backward pass or a model call begins (SOURCE_BACKWARD, SOURCE_MODEL_CALL):
        from the second on, it ends the iteration before. `training`: the call trains (a
        model in train mode, with grad), which only model calls may not."""
        if self.explicit:
            return
        self.calls_since_better[source] += 1
        if self.silenced(source):
            self.idle_since_better[source] += not training
            if self.stalled_above(source, training):
                self.standing_in[source] = True
                self._mark(source)
            return
        if self.calls_since_better[source] > 1:
            self._mark(source)

    def on_explicit_step(self):
        first = not self.explicit
        self.explicit = True
        if first and self.hook_marks > 0:
            return self.count  # the hooks marked this iteration already
        return self._mark(SOURCE_EXPLICIT)


_marker = StepMarker()


def marker():
    return _marker


def _optimizer_module(torch):
    """torch.optim.optimizer, imported here if need be: gpumem installs right after
    `import torch`, and torch (2.11) has not imported torch.optim by then."""
    name = getattr(torch, "__name__", None)
    if name:
        try:
            return importlib.import_module(name + ".optim.optimizer")
        except ImportError:
            return None
    return getattr(getattr(torch, "optim", None), "optimizer", None)


def watch_optimizers(torch):
    """Registers the global optimizer step hook once (torch >= 2.0 has it)."""
    optimizer_module = _optimizer_module(torch)
    register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    if register is None or getattr(optimizer_module, "_gpumem_step_hook", False):
        return False
    register(_marker.on_optimizer_step)
    optimizer_module._gpumem_step_hook = True
    return True
