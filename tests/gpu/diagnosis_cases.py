"""Unchanged-style training scripts for the diagnosis matrix: each is written the way the
PyTorch forums show them, with no gpumem call, under a cap (GPUMEM_CASE_CAP_GIB of the
device, default 4) so that the OOM comes in seconds. The line that leaks carries the
comment `# LEAK`; diagnosis_matrix.py reads its line number to check the named site.

usage: diagnosis_cases.py CASE | list
"""
import os
import sys

import torch

MiB = 1 << 20
CASES = {}


def case(expected):
    def register(fn):
        fn.expected = expected
        CASES[fn.__name__] = fn
        return fn
    return register


def cap_device():
    gib = float(os.environ.get("GPUMEM_CASE_CAP_GIB", "4"))
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, gib * (1 << 30) / total))


def model(width=1024, depth=4):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).cuda()


def batch(n=2048, width=1024):
    return torch.randn(n, width, device="cuda")


def fit(net, opt, x, retain_graph=False):
    """One training step as a script writes it; returns the output and the loss."""
    out = net(x)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward(retain_graph=retain_graph)
    opt.step()
    return out, loss


@case("leak")
def running_loss_tensor():
    net, total = model(), 0
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        _, loss = fit(net, opt, batch())
        total = total + loss * 1.0  # LEAK: keeps every step's graph
    return total


@case("leak")
def validation_without_no_grad():
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    val_loss = 0
    for _ in range(100000):
        fit(net, opt, batch())
        val_loss = val_loss + net(batch(512)).pow(2).mean()  # LEAK: graph of each validation
    return val_loss


@case("leak")
def outputs_kept_in_a_list():
    net, outputs = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        out, _ = fit(net, opt, batch())
        outputs.append(out)  # LEAK: each step's activations stay
    return outputs


@case("leak")
def cache_keyed_by_step():
    net, cache = model(), {}
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(100000):
        x = batch()
        cache[step] = x * 2  # LEAK: a new entry every step
        fit(net, opt, x)
    return cache


@case("leak")
def forward_hook_keeps_activations():
    net, seen = model(), []
    net[0].register_forward_hook(lambda mod, inp, out: seen.append(out))  # LEAK: hook's list
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        fit(net, opt, batch())
    return seen


@case("leak")
def retain_graph_left_in():
    net, losses = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        _, loss = fit(net, opt, batch(), retain_graph=True)
        losses.append(loss)  # LEAK: the retained graph stays with each loss
    return losses


@case("genuine peak")
def does_not_fit_first_step():
    net = model(width=8192, depth=8)  # LEAK: the model itself (no step ever finishes)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    loss = net(batch(16384, 8192)).pow(2).mean()
    loss.backward()
    opt.step()


@case("genuine peak")
def one_long_batch_late():
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(60):
        n = 2048 if step < 40 else 2048 * 64  # LEAK: the long batch (a peak, not a leak)
        fit(net, opt, batch(n))


def leak_line(name):
    src = CASES[name].__code__
    import inspect
    lines, first = inspect.getsourcelines(src)
    for i, line in enumerate(lines):
        if "# LEAK" in line:
            return first + i
    return 0


def main():
    name = sys.argv[1]
    if name == "list":
        for n, fn in CASES.items():  # one expectation for both modes
            expected = fn.expected.replace(" ", "_")
            print(n, expected, expected, leak_line(n))
        return
    cap_device()
    CASES[name]()


if __name__ == "__main__":
    main()
