"""One row of the compatibility matrix: a PyTorch feature used as a training script uses it,
with no gpumem code. Run as `python compat_cases.py CASE`, natively or under `gpumem run`
(with or without --profile-only); prints one JSON line {"case", "ok", "detail", ...figures}
and exits 0 whether the feature worked or not (an uncaught error is a failed row too:
tests/gpu/compat_matrix.py reads the exit status and stderr).
"""
import copy
import json
import os
import sys
import tempfile
import time

import torch

MiB = 1 << 20
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def tiny_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 10)).cuda()


def train(model, steps=5, batch=64, **kw):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        x = torch.randn(batch, 256, device="cuda")
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@case
def memory_api():
    torch.zeros(1, device="cuda")
    base = torch.cuda.memory_allocated()
    t = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    grown = torch.cuda.memory_allocated() - base
    peak = torch.cuda.max_memory_allocated()
    reserved = torch.cuda.memory_reserved()
    stats = torch.cuda.memory_stats()
    summary = torch.cuda.memory_summary()
    del t
    after_free = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    peak_reset = torch.cuda.max_memory_allocated()
    torch.cuda.reset_accumulated_memory_stats()
    free, total = torch.cuda.mem_get_info()
    max_reserved = torch.cuda.max_memory_reserved()
    keys = ["allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
            "active_bytes.all.current", "requested_bytes.all.current", "num_alloc_retries",
            "num_ooms", "allocation.all.allocated", "allocated_bytes.large_pool.current"]
    missing = [k for k in keys if k not in stats]
    ok = (grown >= 256 * MiB and peak >= base + 256 * MiB and reserved >= 256 * MiB
          and not missing and "memory summary" in summary and after_free <= base
          and peak_reset < peak and 0 < free <= total and max_reserved >= reserved - 1)
    return ok, dict(grown=grown, peak=peak, reserved=reserved, missing=missing,
                    summary_title=summary.splitlines()[1].strip(" |") if summary else "",
                    after_free=after_free, peak_after_reset=peak_reset)


@case
def history_snapshot():
    torch.cuda.memory._record_memory_history(max_entries=10000)
    x = torch.randn(1024, 1024, device="cuda")
    y = x @ x
    del y
    snap = torch.cuda.memory._snapshot()
    path = os.path.join(tempfile.mkdtemp(), "snapshot.pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    actions = [e["action"] for e in snap["device_traces"][0]]
    frames = sum(1 for e in snap["device_traces"][0] if e.get("frames"))
    from torch.cuda import _memory_viz
    html = _memory_viz.trace_plot(snap)
    blocks = sum(len(s["blocks"]) for s in snap["segments"])
    ok = ("alloc" in actions and "free_requested" in actions and frames > 0
          and len(snap["segments"]) > 0 and blocks > 0 and len(html) > 1000)
    out = os.environ.get("COMPAT_SNAPSHOT_OUT")
    if out:
        os.replace(path, out)
    return ok, dict(segments=len(snap["segments"]), blocks=blocks, trace_entries=len(actions),
                    entries_with_frames=frames)


@case
def amp_gradscaler():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cuda")
    losses = []
    for _ in range(6):
        x = torch.randn(64, 256, device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return all(l == l for l in losses) and losses[-1] < losses[0], dict(losses=losses)


@case
def side_stream_record_stream():
    side = torch.cuda.Stream()
    x = torch.randn(4096, 4096, device="cuda")
    ref = (x * 2).sum().item()
    with torch.cuda.stream(side):
        side.wait_stream(torch.cuda.current_stream())
        y = x * 2
    y.record_stream(torch.cuda.current_stream())
    torch.cuda.current_stream().wait_stream(side)
    got = y.sum().item()
    del y
    z = torch.ones(4096, 4096, device="cuda")  # may reuse y's memory only after its uses
    torch.cuda.synchronize()
    return abs(got - ref) <= 1e-3 * abs(ref) + 1 and z.sum().item() == 4096 * 4096, {}


@case
def dataloader_pin_memory():
    data = torch.utils.data.TensorDataset(torch.randn(512, 256), torch.randint(0, 10, (512,)))
    loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=2, pin_memory=True)
    model = tiny_model()
    n = 0
    for x, y in loader:
        assert x.is_pinned()
        model(x.cuda(non_blocking=True)).sum().backward()
        n += 1
    return n == 8, dict(batches=n)


@case
def compile_default():
    model = tiny_model()
    x = torch.randn(64, 256, device="cuda")
    eager = model(x)
    compiled = torch.compile(model)(x)
    return torch.allclose(eager, compiled, atol=1e-4, rtol=1e-4), {}


@case
def compile_reduce_overhead():
    model = tiny_model()
    ref = tiny_model()
    ref.load_state_dict(model.state_dict())
    step = torch.compile(model, mode="reduce-overhead")
    xs = [torch.randn(64, 256, device="cuda") for _ in range(6)]
    outs = [step(x).clone() for x in xs]
    refs = [ref(x) for x in xs]
    # Training through the graphs: forward and backward recorded, then replayed.
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x in xs:
        loss = step(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    same = all(torch.allclose(o, r, atol=1e-4, rtol=1e-4) for o, r in zip(outs, refs))
    return same and loss.item() == loss.item(), dict(allocated=torch.cuda.memory_allocated())


@case
def cuda_graph():
    model = tiny_model()
    static_x = torch.randn(64, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    before = torch.cuda.memory_allocated()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = model(static_x)
    during = torch.cuda.memory_allocated()
    filler = [torch.randn(64, 512, device="cuda") for _ in range(8)]  # must not reuse the pool
    ok = True
    for _ in range(3):
        x = torch.randn(64, 256, device="cuda")
        static_x.copy_(x)
        g.replay()
        ok &= torch.allclose(static_y, model(x), atol=1e-4, rtol=1e-4)
    del filler
    g.reset()
    return bool(ok) and during > before, dict(pool_bytes=during - before)


@case
def make_graphed_callables():
    model = tiny_model()
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(model, (x,))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(5):
        x = torch.randn(64, 256, device="cuda", requires_grad=True)
        loss = graphed(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses[-1] < losses[0], dict(losses=losses)


@case
def make_graphed_callables_after_eager_calls():
    """A model checked eagerly before it is graphed, and a copy of it graphed too:
    make_graphed_callables refuses modules with hooks, and gpumem's model-call hook is on
    the first model called (and, inert, on its copies)."""
    model = tiny_model()
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    before = model(x).pow(2).mean().item()
    twin = copy.deepcopy(model)
    graphed, graphed_twin = torch.cuda.make_graphed_callables((model, twin), ((x,), (x,)))
    same = torch.allclose(graphed(x), graphed_twin(x))
    return same and abs(graphed(x).pow(2).mean().item() - before) < 1e-4, dict(before=before)


@case
def mempool():
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
        b = torch.empty(1000, device="cuda")
    outside = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
    uses = pool.use_count()
    segs = pool.snapshot()
    pool_ptrs = {blk_addr for s in segs for blk_addr in [s["address"]]}
    a_ptr, b_ptr = a.data_ptr(), b.data_ptr()
    in_pool = all(any(s["address"] <= p < s["address"] + s["total_size"] for s in segs)
                  for p in (a_ptr, b_ptr))
    out_of_pool = not any(s["address"] <= outside.data_ptr() < s["address"] + s["total_size"]
                          for s in segs)
    del a, b
    del pool
    torch.cuda.empty_cache()
    return in_pool and out_of_pool and uses >= 1, dict(use_count=uses, pool_segments=len(segs),
                                                       pool_ptrs=len(pool_ptrs))


@case
def oom_retry():
    torch.zeros(1, device="cuda")
    free0, total = torch.cuda.mem_get_info()
    t0 = time.perf_counter()
    try:
        torch.empty(1 << 40, dtype=torch.uint8, device="cuda")
        huge_failed = False
    except torch.OutOfMemoryError as e:
        huge_failed = "Tried to allocate" in str(e)
    huge_s = time.perf_counter() - t0
    reserved_after_huge = torch.cuda.memory_reserved()
    # A batch-size finder: double until OOM, keep the last batch that fitted. The try is
    # in a function of its own, as finders write it, so that nothing the failed try made
    # stays referenced from this frame.
    model = torch.nn.Linear(4096, 4096).cuda()

    def fits(batch):
        try:
            model(torch.randn(batch, 4096, device="cuda")).sum().backward()
            return True
        except torch.OutOfMemoryError:
            return False

    batch, last_ok, ooms = 1024, 0, 0
    while batch < (1 << 24):
        if not fits(batch):
            ooms += 1
            break
        last_ok = batch
        batch *= 2
    model.zero_grad(set_to_none=True)
    working = torch.cuda.max_memory_allocated()
    reserved = torch.cuda.memory_reserved()
    free1, _ = torch.cuda.mem_get_info()
    x = torch.randn(last_ok // 2, 4096, device="cuda")  # training goes on at a safe size
    model(x).sum().backward()
    ok = huge_failed and ooms == 1 and reserved_after_huge < 1 << 30
    return ok, dict(huge_fail_seconds=round(huge_s, 3), reserved_after_huge=reserved_after_huge,
                    last_ok_batch=last_ok, working_set=working, reserved_after_finder=reserved,
                    driver_free_before=free0, driver_free_after_finder=free1, total=total)


@case
def checkpoint_save_load():
    model = tiny_model()
    train(model, steps=2)
    path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    torch.save(model.state_dict(), path)
    other = tiny_model()
    other.load_state_dict(torch.load(path, map_location="cuda"))
    x = torch.randn(8, 256, device="cuda")
    return torch.equal(model(x), other(x)), {}


@case
def model_copied_saved_exported():
    """After training (an optimizer marks the steps): the model deep-copied as an EMA or
    teacher is, saved whole with torch.save and loaded, scripted, traced and exported;
    each must give the trained model's output."""
    model = tiny_model()
    train(model, steps=3)
    x = torch.randn(8, 256, device="cuda")
    want, path = model(x), os.path.join(tempfile.mkdtemp(), "whole.pt")
    ways = {"deepcopy": lambda: __import__("copy").deepcopy(model),
            "save_load": lambda: (torch.save(model, path),
                                  torch.load(path, weights_only=False))[1],
            "jit_trace": lambda: torch.jit.trace(model, x),
            "export": lambda: torch.export.export(model, (x,)).module(),
            "jit_script": lambda: torch.jit.script(model)}  # last: it may unhook the model
    figures = {}
    for name, make in ways.items():
        try:
            figures[name] = "same" if torch.allclose(make()(x), want) else "differs"
        except Exception as e:  # noqa: BLE001 (any failure is the row's finding)
            figures[name] = f"{type(e).__name__}: {str(e)[:120]}"
    return all(v == "same" for v in figures.values()), figures


@case
def gradient_checkpointing():
    from torch.utils.checkpoint import checkpoint
    model = tiny_model()
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    checkpoint(model, x, use_reentrant=False).sum().backward()
    g1 = x.grad.clone()
    x.grad = None
    model(x).sum().backward()
    return torch.allclose(g1, x.grad, atol=1e-5), {}


@case
def profiler_memory():
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 profile_memory=True) as prof:
        x = torch.randn(1024, 1024, device="cuda")
        y = x @ x
        del x, y
    mem = sum(max(e.device_memory_usage, 0) for e in prof.events())
    return mem > 0, dict(device_memory_usage=mem)


@case
def hf_trainer():
    try:
        import transformers
    except ImportError:
        return None, dict(skipped="transformers is not installed")
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=128, n_positions=64)
    model = GPT2LMHeadModel(config)
    ids = torch.randint(0, 128, (64, 32))
    data = [{"input_ids": r, "labels": r} for r in ids]
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=8,
                             max_steps=6, report_to=[], logging_steps=2, save_strategy="no",
                             disable_tqdm=True)
    result = Trainer(model=model, args=args, train_dataset=data).train()
    return result.training_loss == result.training_loss, dict(
        transformers=transformers.__version__, loss=result.training_loss)


@case
def data_parallel_and_copies_between_gpus():
    """nn.DataParallel over every GPU (what Hugging Face's Trainer does on a machine of
    several) gives the one-GPU model's outputs; tensors small and large copied each way
    between two GPUs arrive whole."""
    if torch.cuda.device_count() < 2:
        return None, dict(skipped="needs two GPUs")
    model = tiny_model()
    x = torch.randn(256, 256, device="cuda")
    expected = model(x)
    parallel = torch.nn.DataParallel(model)
    same = torch.allclose(parallel(x), expected, rtol=1e-4, atol=1e-4)  # other batch splits
    losses = train(parallel, steps=5, batch=256)
    copies = []
    for n in (1 << 10, 3 << 20, 200 << 20):  # a small block, a large one, many pages
        a = torch.arange(n // 4, dtype=torch.float32, device="cuda:0")
        b = a.to("cuda:1")
        copies.append(torch.equal(b.to("cuda:0"), a) and b.device.index == 1)
    ok = same and all(copies) and losses[-1] < losses[0]
    return ok, dict(same_outputs=same, copies=copies, losses=losses)


def _receive_and_answer(inbox, outbox):
    """The receiving process of cuda_tensors_sent_between_processes (spawned: it runs
    under gpumem when its parent does, through the environment)."""
    small, large = inbox.get()
    expected = [torch.arange(t.numel(), device="cuda", dtype=t.dtype) for t in (small, large)]
    seen = [torch.equal(t, e) for t, e in zip((small, large), expected)]
    small.add_(1)  # the sender sees these: the same memory
    large.add_(1)
    torch.cuda.synchronize()
    answer = torch.full((3, 1 << 20), 7.0, device="cuda")  # 12 MiB made here, sent back
    outbox.put((seen, "gpumem" in sys.modules, answer))
    inbox.get()  # kept until the sender has read the answer


@case
def cuda_tensors_sent_between_processes():
    """torch.multiprocessing sends CUDA tensors both ways: a small block and one of many
    pages to a spawned process, which sees their values, writes into them (the sender
    sees the writes) and sends back a tensor of its own."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_receive_and_answer, args=(inbox, outbox))
    child.start()
    small = torch.arange(1000, dtype=torch.float32, device="cuda")
    large = torch.arange(40 << 20, dtype=torch.int32, device="cuda")  # 160 MiB, many pages
    inbox.put((small, large))
    seen, child_under_gpumem, answer = outbox.get(timeout=120)
    torch.cuda.synchronize()
    written = [torch.equal(small, torch.arange(1000, dtype=torch.float32, device="cuda") + 1),
               torch.equal(large, torch.arange(large.numel(), dtype=torch.int32, device="cuda") + 1)]
    answered = bool((answer == 7.0).all()) and answer.shape == (3, 1 << 20)
    del answer
    inbox.put(None)
    child.join(timeout=120)
    ok = all(seen) and all(written) and answered and child.exitcode == 0
    return ok, dict(seen=seen, written=written, answered=answered, exitcode=child.exitcode,
                    child_under_gpumem=child_under_gpumem)


@case
def ddp_one_gpu():
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("nccl", rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(tiny_model())
    losses = train(model, steps=5)
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    dist.destroy_process_group()
    return losses[-1] < losses[0] and t[0].item() == 1.0, dict(losses=losses)


def main():
    name = sys.argv[1]
    if name == "list":
        print(" ".join(CASES))
        return
    ok, figures = CASES[name]()
    row = {"case": name, "ok": ok}
    row.update(figures)
    print(json.dumps(row, default=str), flush=True)


if __name__ == "__main__":
    main()
