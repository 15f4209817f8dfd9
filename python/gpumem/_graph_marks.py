"""Step marks for loops that replay a captured CUDA graph (_steps.py ranks the sources,
graph replays last): a whole training step captured once, as PyTorch's CUDA graphs notes
show it, then replayed, so that no optimizer step, backward pass or model call runs in
Python after the capture. Each replay of the lead graph (the first replayed) begins an
iteration, from the second on; a graph replayed twice while the lead is not takes the
lead (the lead was a warm-up's). Other graphs replayed within an iteration (a forward and
a backward graph of make_graphed_callables) add no steps.
"""
import functools
import threading

from . import _steps


class GraphReplays:
    def __init__(self, marker):
        self.marker = marker
        self.graphs = _steps.Lead()
        self.lock = threading.Lock()

    def replayed(self, graph):
        with self.lock:
            marks = self.graphs.marks(id(graph))
        if marks:
            self.marker.on_loop_start(_steps.SOURCE_GRAPH_REPLAY)


def watch_graph_replays(torch, marker=None):
    """Marks at CUDAGraph.replay; once per process. Returns whether it installed."""
    graph_class = getattr(_steps.torch_submodule(torch, "cuda.graphs"), "CUDAGraph", None)
    original = getattr(graph_class, "replay", None)
    if original is None or getattr(original, "_gpumem_marks", False):
        return False
    replays = GraphReplays(marker or _steps.marker())

    @functools.wraps(original)
    def replay(self, *args, **kwargs):
        replays.replayed(self)
        return original(self, *args, **kwargs)

    replay._gpumem_marks = True
    graph_class.replay = replay
    return True
