"""Step marks for loops that replay a captured CUDA graph (_steps.py ranks the sources,
graph replays last): a whole training step captured once, as PyTorch's CUDA graphs notes
show it, then replayed, so that no optimizer step, backward pass or model call runs in
Python after the capture. Each replay of the lead graph (the first replayed) begins an
iteration, from the second on; a graph replayed twice while the lead is not takes the
lead (the lead was a warm-up's). Other graphs replayed within an iteration (a forward and
a backward graph of make_graphed_callables) add no steps.
"""
import functools
import importlib
import threading

from . import _steps


class GraphReplays:
    def __init__(self, marker):
        self.marker = marker
        self.lead = None         # id() of the lead graph
        self.since_lead = set()  # ids of the other graphs replayed since the lead was
        self.lock = threading.Lock()

    def replayed(self, graph):
        key = id(graph)
        with self.lock:
            if self.lead is None:
                self.lead = key
            if key != self.lead:
                if key not in self.since_lead:
                    self.since_lead.add(key)
                    return
                self.lead = key  # replayed twice without the lead: it leads now
            self.since_lead.clear()
        self.marker.on_loop_start(_steps.SOURCE_GRAPH_REPLAY)


def _graphs_module(torch):
    graphs = getattr(getattr(torch, "cuda", None), "graphs", None)
    if graphs is None and getattr(torch, "__name__", None):
        try:  # not imported yet when gpumem installs during `import torch`
            graphs = importlib.import_module(torch.__name__ + ".cuda.graphs")
        except ImportError:
            return None
    return graphs


def watch_graph_replays(torch, marker=None):
    """Marks at CUDAGraph.replay; once per process. Returns whether it installed."""
    graph_class = getattr(_graphs_module(torch), "CUDAGraph", None)
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
