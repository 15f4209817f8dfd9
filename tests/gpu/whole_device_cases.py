"""Scripts that run out of the whole GPU, with no cap, as users run them: the
out-of-memory comes from the driver's last page (and the CUDA context, cuBLAS' workspaces
and whatever else took device memory), not from a fraction PyTorch was told. Sizes come
from the device's memory, so a script fills an 80 GiB H100 or a 141 GB H200 in about the
same number of steps. For diagnosis_matrix.py (`--script whole_device_cases.py`,
`tests/gpu/run.sh wholedevice`), one case on each GPU at a time.

usage: whole_device_cases.py CASE | list
"""
import random

import torch

from case_registry import Cases
from diagnosis_cases import fit  # one training step as a script writes it

CASES = Cases()
case = CASES.case
MiB = 1 << 20
WIDTH = 4096


def device_bytes():
    return torch.cuda.get_device_properties(0).total_memory


def rows_for(fraction_of_device, width=WIDTH):
    """Rows of a float32 batch `width` wide that take that fraction of the device."""
    return int(fraction_of_device * device_bytes() / (4 * width))


def mlp(depth=4, width=WIDTH):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).cuda()


@case("leak")
def outputs_kept_with_their_graphs():
    """Each step's output kept for an epoch-end metric, graph and all: the activations of
    a batch of 0.05% of the device, about 0.4% of it a step."""
    net, outputs = mlp(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    for _ in range(100000):
        out = net(torch.randn(rows_for(0.0005), WIDTH, device="cuda"))  # LEAK: kept below
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        outputs.append(out)


@case("leak")
def lookups_from_a_large_table_kept():
    """A frozen embedding table of 60% of the device, a small head trained on lookups of
    it, and every step's lookups kept (32 MiB a step): the leak fills the rest."""
    table = torch.nn.Embedding(int(0.6 * device_bytes()) // (4 * 1024), 1024, device="cuda")
    table.requires_grad_(False)
    head = mlp(depth=2, width=1024)
    opt = torch.optim.Adam(head.parameters(), lr=1e-4)
    recent = []
    for _ in range(100000):
        ids = torch.randint(0, table.num_embeddings, (8192,), device="cuda")
        vectors = table(ids)  # LEAK: kept below
        fit(head, opt, vectors)
        recent.append(vectors)


@case("genuine peak")
def adam_states_do_not_fit_the_device():
    """Weights of 30% of the device and their gradients fit; AdamW's two moments at the
    first optimizer step do not."""
    layers = int(0.3 * device_bytes()) // (4 * 8192 * 8192)
    net = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192, bias=False, device="cuda")
                                for _ in range(layers)])
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    for _ in range(100):
        fit(net, opt, torch.randn(64, 8192, device="cuda"))


@case("genuine peak")
def one_long_batch_late_exceeds_the_device():
    """Forty steps at a batch of 0.5% of the device, then one of 20%, whose activations
    need more than the device has."""
    net = mlp()
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    for step in range(60):
        rows = rows_for(0.2 if step == 40 else 0.005)
        fit(net, opt, torch.randn(rows, WIDTH, device="cuda"))


@case("fragmentation", "completes")
def pieces_kept_from_one_large_block():
    """One block of 85% of the device, freed and carved into pieces of 96-159 MiB, every
    other one kept; then a request of 30%. The free memory is there, in pieces: PyTorch's
    cache cannot give its half-used segment back to the driver; gpumem stitches pages."""
    total = device_bytes()
    big = torch.empty(int(0.85 * total), dtype=torch.uint8, device="cuda")
    del big
    pieces = [torch.empty((96 + i % 64) * MiB, dtype=torch.uint8, device="cuda")
              for i in range(int(0.85 * total) // (128 * MiB))]
    kept = pieces[::2]  # LEAK: the kept pieces pin the segment (fragmentation, not a leak)
    del pieces
    whole = torch.empty(int(0.3 * total), dtype=torch.uint8, device="cuda")
    return kept, whole


@case("no leak")
def batches_of_random_length_up_to_a_quarter_of_the_device():
    """200 steps of a bfloat16 model at batches of random length whose activations take up
    to about a quarter of the device: no leak, and no warning of one."""
    net = mlp(width=1024).to(torch.bfloat16)
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    rng = random.Random(0)
    for _ in range(200):
        rows = int(rng.uniform(0.005, 0.03) * device_bytes()) // (2 * 1024)
        fit(net, opt, torch.randn(rows, 1024, device="cuda", dtype=torch.bfloat16))


@case("leak")
def features_kept_beside_batches_of_random_length():
    """A bfloat16 model on batches of random length (activations up to 9% of the device),
    keeping a copy of the first 64 features of every row: a leak of ~50 MiB a step on
    average, never the same twice."""
    net = mlp(width=1024).to(torch.bfloat16)
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    rng = random.Random(0)
    features = []
    for _ in range(100000):
        rows = int(rng.uniform(0.002, 0.01) * device_bytes()) // (2 * 1024)
        out = net(torch.randn(rows, 1024, device="cuda", dtype=torch.bfloat16))
        loss = out.float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        features.append(out[:, :64].detach().clone())  # LEAK


@case("leak")
def replay_buffer_without_a_bound_fills_the_device():
    """A replay buffer that is never trimmed, 8 MiB of states a step, beside a small
    network: some 17,000 steps on an H200 before the device is full."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1024, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 4)).cuda()
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    buffer = []
    for _ in range(1000000):
        states = torch.randn(2048, 1024, device="cuda")  # LEAK: kept below
        buffer.append(states)
        batch = buffer[-1][torch.randint(0, 2048, (256,), device="cuda")]
        loss = net(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    CASES.main()
