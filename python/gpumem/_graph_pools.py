"""Notes in the trace that bound each CUDA graph's private memory pool (hooks/
gpumem_trace.h, gpumem_trace_graph_pool): when a capture into it begins and ends, and when
the last graph that used it is gone. A graph kept alive keeps all the memory its capture
needed, free or not, from every other allocation; with these notes the report counts that
memory with the code that captured it, so a graph kept every epoch is named as the leak it
is. Graphs that share a pool (make_graphed_callables, pool=other.pool()) release it with
the last of them.
"""
import functools
import threading

from . import _native, _steps

CAPTURE_BEGINS, CAPTURE_ENDS, RELEASED = 1, 2, 3
_U64 = (1 << 64) - 1


def _note_in_trace(device, change, pool):
    _native.call_optional("gpumem_trace_graph_pool", device, change, pool[0] & _U64,
                          pool[1] & _U64)


NEW_POOL = (0, 0)  # PyTorch's default pool, never a graph's: a new pool, named at its end


class GraphPools:
    """The graphs that use each pool, by (device, pool id); notes each change. PyTorch
    names a graph's new pool only once its capture has ended, so a capture into one
    begins as NEW_POOL and its end names it."""

    def __init__(self, note):
        self.note = note
        self.lock = threading.Lock()
        self.users = {}      # (device, pool) -> ids of the live graphs captured into it
        self.pool_of = {}    # graph id -> (device, pool)
        self.capturing = {}  # graph id -> device, while its capture runs

    def capture_begins(self, graph, device, pool=None):
        """`pool`: the pool the program named for the capture (shared), else None."""
        released = self._forget(id(graph))  # captured again: it leaves its old pool
        with self.lock:
            self.capturing[id(graph)] = device
        if released is not None:
            self._say(released, RELEASED)
        self._say((device, tuple(pool) if pool is not None else NEW_POOL), CAPTURE_BEGINS)

    def capture_ends(self, graph, pool):
        """`pool`: the graph's pool, None where the capture failed."""
        with self.lock:
            device = self.capturing.pop(id(graph), None)
            if device is None:
                return
            key = (device, tuple(pool) if pool is not None else NEW_POOL)
            if pool is not None:
                self.users.setdefault(key, set()).add(id(graph))
                self.pool_of[id(graph)] = key
        self._say(key, CAPTURE_ENDS)

    def dropped(self, graph_id):
        """The graph was reset or is gone: its pool is released with its last graph."""
        released = self._forget(graph_id)
        if released is not None:
            self._say(released, RELEASED)

    def _forget(self, graph_id):
        """Removes the graph; the pool it leaves empty, or None."""
        with self.lock:
            self.capturing.pop(graph_id, None)
            key = self.pool_of.pop(graph_id, None)
            if key is None:
                return None
            users = self.users.get(key, set())
            users.discard(graph_id)
            if users:
                return None
            self.users.pop(key, None)
            return key

    def _say(self, key, change):
        try:
            self.note(key[0], change, key[1])
        except Exception:  # a note it cannot write must not break the program's capture
            pass


def _as_pool(value):
    """A pool id as two numbers, or None where it is not one."""
    try:
        pool = tuple(value)
    except TypeError:
        return None
    if len(pool) != 2 or not all(isinstance(n, int) for n in pool):
        return None
    return pool


def _pool_of(graph):
    """The graph's pool id once its capture has ended, or None (PyTorch refuses before)."""
    try:
        return _as_pool(graph.pool())
    except Exception:
        return None


def watch_graph_pools(torch, note=None):
    """Notes at CUDAGraph.capture_begin, capture_end and reset, and when a graph is
    collected; once per process. Returns whether it installed."""
    graph_class = getattr(_steps.torch_submodule(torch, "cuda.graphs"), "CUDAGraph", None)
    begin = getattr(graph_class, "capture_begin", None)
    end = getattr(graph_class, "capture_end", None)
    if begin is None or end is None or getattr(begin, "_gpumem_pools", False):
        return False
    pools = GraphPools(note or _note_in_trace)

    @functools.wraps(begin)
    def capture_begin(self, *args, **kwargs):
        result = begin(self, *args, **kwargs)
        shared = args[0] if args else kwargs.get("pool")
        try:
            device = torch.cuda.current_device()
        except Exception:  # the capture has begun: nothing of gpumem's may undo it
            return result
        pools.capture_begins(self, device, _as_pool(shared) if shared is not None else None)
        return result

    @functools.wraps(end)
    def capture_end(self, *args, **kwargs):
        try:
            return end(self, *args, **kwargs)
        finally:
            pools.capture_ends(self, _pool_of(self))

    capture_begin._gpumem_pools = True
    graph_class.capture_begin = capture_begin
    graph_class.capture_end = capture_end
    _watch_graph_end(graph_class, pools)
    return True


def _watch_graph_end(graph_class, pools):
    """A graph reset or destroyed leaves its pool: its class's reset and __del__ say so
    (so the graphs themselves need take neither weak references nor attributes)."""
    reset = getattr(graph_class, "reset", None)
    if reset is not None:
        @functools.wraps(reset)
        def reset_graph(self, *args, **kwargs):
            result = reset(self, *args, **kwargs)
            pools.dropped(id(self))
            return result
        graph_class.reset = reset_graph
    finalize = getattr(graph_class, "__del__", None)

    def destroyed(self):
        try:
            pools.dropped(id(self))
        except Exception:  # at interpreter exit the package may be half gone
            pass
        if finalize is not None:
            finalize(self)

    graph_class.__del__ = destroyed
