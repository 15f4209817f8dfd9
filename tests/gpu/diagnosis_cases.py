"""Unchanged-style training scripts for the diagnosis matrix: each is written the way the
PyTorch forums show them, with no gpumem call, under a cap (GPUMEM_CASE_CAP_GIB of the
device, default 4) so that the OOM comes in seconds. The line that leaks carries the
comment `# LEAK`; diagnosis_matrix.py reads its line number to check the named site.

usage: diagnosis_cases.py CASE | list
"""
import collections
import copy
import functools
import os
import sys

import torch

from case_registry import Cases

MiB = 1 << 20
CASES = Cases()
case = CASES.case  # case(verdict under profile-only[, under gpumem's allocator])


def cap_device():
    gib = float(os.environ.get("GPUMEM_CASE_CAP_GIB", "4"))
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, gib * (1 << 30) / total))


SKIPPED = 77  # the exit status of a case this machine cannot run (diagnosis_matrix.py)


def two_gpus():
    """Caps the second GPU as cap_device() does the first; exits SKIPPED, saying why, where
    fewer than two are visible."""
    if torch.cuda.device_count() < 2:
        print(f"skipped: needs two GPUs, {torch.cuda.device_count()} visible", file=sys.stderr)
        sys.exit(SKIPPED)
    gib = float(os.environ.get("GPUMEM_CASE_CAP_GIB", "4"))
    total = torch.cuda.get_device_properties(1).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, gib * (1 << 30) / total), device=1)


def linear_layers(width, depth):
    """`depth` linear layers of `width`, each followed by a ReLU, on the host."""
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def model(width=1024, depth=4):
    torch.manual_seed(0)
    return linear_layers(width, depth).cuda()


def batch(n=2048, width=1024):
    return torch.randn(n, width, device="cuda")


def fit(net, opt, x):
    """One training step as a script writes it; returns the output and the loss."""
    out = net(x)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return out, loss


def with_head(layer_class, width):
    """A `layer_class()` under test, then a ReLU and a linear head, seeded."""
    torch.manual_seed(0)
    return torch.nn.Sequential(layer_class(), torch.nn.ReLU(),
                               torch.nn.Linear(width, width)).cuda()


def trained(steps):
    """A model after `steps` training steps, put in eval mode."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(steps):
        fit(net, opt, batch())
    return net.eval()


def epochs_then_validation(validate, epochs=6, steps=200):
    """Epochs of `steps` training steps, each followed by `validate(net)` in eval mode
    under no_grad."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for epoch in range(epochs):
        net.train()
        for _ in range(steps):
            fit(net, opt, batch())
        net.eval()
        with torch.no_grad():
            print(f"epoch {epoch}: validation {validate(net)}")


@case("no leak")
def running_loss_tensor():
    """`total += loss` after backward keeps autograd nodes on the host, not device memory:
    the right answer is no device leak (the run ends normally)."""
    net, total = model(), 0
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(3000):
        _, loss = fit(net, opt, batch())
        total = total + loss * 1.0
    return total


@case("leak")
def predictions_kept_for_epoch_metric():
    """A slow leak far from an OOM (4 KiB a step): still named, with its line."""
    net, preds = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(3000):
        out, _ = fit(net, opt, batch(512))
        preds.append(out.argmax(1))  # LEAK: kept on the device until the epoch ends
    return preds


# In the cases below the named site is where the kept memory was allocated: the line of
# the forward whose output (or graph) is kept, which is what an allocation trace can see.
@case("leak")
def validation_without_no_grad():
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    val_loss = 0
    for _ in range(100000):
        fit(net, opt, batch())
        val_loss = val_loss + net(batch(512)).pow(2).mean()  # LEAK: graph of each validation
    return val_loss


def train_keeping_outputs(net):
    """Trains `net`, keeping every step's output in a list."""
    outputs = []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        out = net(batch())  # LEAK: kept below, one output a step
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        outputs.append(out)
    return outputs


@case("leak", leak_in=train_keeping_outputs)
def outputs_kept_in_a_list():
    return train_keeping_outputs(model())


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
    net[0].register_forward_hook(lambda mod, inp, out: seen.append(out))  # keeps net[0]'s output
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        loss = net(batch()).pow(2).mean()  # LEAK: the forward whose first output the hook keeps
        opt.zero_grad()
        loss.backward()
        opt.step()
    return seen


@case("leak")
def retain_graph_left_in():
    net, losses = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        loss = net(batch()).pow(2).mean()  # LEAK: its saved activations stay with the graph
        opt.zero_grad()
        loss.backward(retain_graph=True)
        opt.step()
        losses.append(loss)
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


@case("fragmentation", "completes")
def fragmented_under_cap():
    """Variable-size buffers carved from one cached segment, every other one kept: the
    free memory is there but in pieces. gpumem's allocator stitches pages; PyTorch's
    cannot release the half-used segment and the cap stops a new one."""
    gib = float(os.environ.get("GPUMEM_CASE_CAP_GIB", "4"))
    big = torch.empty(int(gib * 0.85 * (1 << 30)), dtype=torch.uint8, device="cuda")
    del big
    pieces = [torch.empty(96 * MiB + i * MiB, dtype=torch.uint8, device="cuda")
              for i in range(int(gib * 0.85 * 1024) // 110)]
    kept = pieces[::2]  # LEAK: the kept pieces pin the segment (fragmentation, not a leak)
    del pieces
    whole = torch.empty(int(gib * 0.3 * (1 << 30)), dtype=torch.uint8, device="cuda")
    return kept, whole


# A model split over two GPUs in one process (naive model parallelism): each device's
# memory is its own, and what one keeps frees nothing on the other.
def split_model(first_depth, second_depth, width=1024):
    """Linear layers with ReLUs: `first_depth` of them on cuda:0, `second_depth` on
    cuda:1, and one optimizer over both."""
    torch.manual_seed(0)
    first = linear_layers(width, first_depth).to("cuda:0")
    second = linear_layers(width, second_depth).to("cuda:1")
    opt = torch.optim.SGD(list(first.parameters()) + list(second.parameters()), lr=1e-3)
    return first, second, opt


def fit_split(first, second, opt, x):
    """One step of the split model; returns the first half's and the whole's output."""
    h = first(x)
    out = second(h.to("cuda:1"))
    opt.zero_grad()
    out.pow(2).mean().backward()
    opt.step()
    return h, out


@case("leak")
def model_split_over_two_gpus_keeps_outputs():
    two_gpus()
    first, second, opt = split_model(2, 2)
    outputs = []
    for _ in range(100000):
        h = first(batch())
        out = second(h.to("cuda:1"))  # LEAK: the second GPU's outputs, kept
        opt.zero_grad()
        out.pow(2).mean().backward()
        opt.step()
        outputs.append(out)
    return outputs


@case("leak", leak_in=train_keeping_outputs)
def outputs_kept_on_the_second_gpu_made_current():
    """torch.cuda.set_device(1) and then .cuda() and device="cuda" everywhere: every
    block on cuda:1, none on cuda:0."""
    two_gpus()
    torch.cuda.set_device(1)
    return train_keeping_outputs(model())


@case("genuine peak", leak_in=does_not_fit_first_step)
def first_step_too_large_on_the_second_gpu_made_current():
    two_gpus()
    torch.cuda.set_device(1)
    does_not_fit_first_step()


@case("genuine peak")
def model_split_over_two_gpus_with_a_long_batch_late():
    """cuda:0 keeps 6 MiB of features a step (1.8 GiB by step 300, under its cap); the
    long batch of step 300 does not fit in the six layers on cuda:1, whatever cuda:0
    keeps: a genuine peak on cuda:1."""
    two_gpus()
    first, second, opt = split_model(1, 6)
    kept = []
    for step in range(320):
        n = 2048 if step < 300 else 2048 * 48  # LEAK: the long batch (a peak on cuda:1)
        h, _ = fit_split(first, second, opt, batch(n))
        kept.append(h[:1536].detach().clone())  # 6 MiB a step kept on cuda:0
    return kept


# Deep models of identical layers: each layer allocates the same stacks as the last, as
# a pass of a loop that nothing marks does; the layers of one forward pass are not passes.
@case("genuine peak")
def deep_model_does_not_fit_first_step():
    """40 layers whose outputs (128 MiB each) are kept for the backward pass: 5 GiB."""
    net = model(depth=40)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(10):
        fit(net, opt, batch(2048 * 16))  # LEAK: the first batch (a peak, not a leak)


@case("no leak")
def deep_model_trains():
    net = model(depth=24)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(300):
        fit(net, opt, batch())


# nn.DataParallel over two GPUs (what a Trainer does on a machine of several without
# torchrun): each call scatters the batch, runs the replicas on threads of their own and
# gathers their outputs on cuda:0.
@case("leak", leak_in=train_keeping_outputs)
def data_parallel_outputs_kept():
    """The outputs, gathered on cuda:0, are kept."""
    two_gpus()
    return train_keeping_outputs(torch.nn.DataParallel(model()))


@case("genuine peak")
def data_parallel_first_batch_too_large():
    """48 layers of one shape, whose outputs (96 MiB each a replica) are kept for the
    backward pass, 4.5 GiB on each GPU's 4: the replicas' threads hold them, as a loop
    does, not as a helper queueing batches."""
    two_gpus()
    net = torch.nn.DataParallel(model(depth=48))
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(10):
        fit(net, opt, batch(2048 * 24))  # LEAK: the first batch (a peak, not a leak)


# Patterns that look like a leak or a peak to a naive reading and are not, and leaks
# that do not grow by the same amount every step.
@case("no leak")
def gradient_accumulation():
    """Four micro-batches a step, the optimizer stepped every fourth: memory rises and
    falls four times a step and nothing is kept."""
    net = model()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    for step in range(800):
        for _ in range(4):
            loss = net(batch(1024)).pow(2).mean() / 4
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


@case("no leak")
def periodic_evaluation():
    """Every 250 steps an evaluation with four times the batch under no_grad: spikes at
    the steps it runs in, nothing kept."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(1500):
        fit(net, opt, batch())
        if step % 250 == 249:
            net.eval()
            with torch.no_grad():
                scores = [net(batch(8192)).mean() for _ in range(8)]
            print(f"step {step} eval {torch.stack(scores).mean().item():.4f}")
            net.train()


@case("leak")
def output_slices_kept_with_validation_each_epoch():
    """Epochs of 100 steps that keep a slice of each output (which keeps all of it), each
    followed by a validation pass of 40 batches in eval mode under no_grad: the steps are
    the optimizer's, not the validation's batches."""
    net, samples = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for epoch in range(1000):
        net.train()
        for _ in range(100):
            out = net(batch())  # LEAK: kept whole through the slice below
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            samples.append(out[:4])
        net.eval()
        with torch.no_grad():
            val = sum(net(batch()).pow(2).mean().item() for _ in range(40)) / 40
        print(f"epoch {epoch} val {val:.4f}")
    return samples


@case("no leak")
def ema_copy_made_late():
    """An exponential moving average of the weights, copied once a third of the way in:
    one jump in live memory, then flat."""
    net, ema = model(), None
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(1500):
        fit(net, opt, batch())
        if step == 500:
            ema = copy.deepcopy(net)
        if ema is not None:
            with torch.no_grad():
                for e, p in zip(ema.parameters(), net.parameters()):
                    e.mul_(0.999).add_(p, alpha=0.001)
    return ema


@case("no leak")
def bounded_cache_of_recent_outputs():
    """The last 16 outputs kept for a running metric: memory grows for 16 steps, then each
    new entry pushes the oldest out."""
    net, recent = model(), collections.deque(maxlen=16)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(1500):
        out, _ = fit(net, opt, batch())
        recent.append(out.detach())
    return recent


@case("genuine peak")
def sequence_length_warmup():
    """Each step's batch is longer than the last (a length warm-up that overshoots): the
    peak within a step grows until it does not fit; nothing is kept between steps."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(100000):
        fit(net, opt, batch(1024 + 256 * step))  # LEAK: the growing batch (a peak, not a leak)


@case("leak")
def slice_keeps_whole_output_variable_batches():
    """Batches of random length; a one-row slice of each output is kept, which keeps the
    whole output: the leak grows by a different amount every step."""
    net, firsts = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    lengths = torch.randint(512, 4096, (100000,), generator=torch.Generator().manual_seed(0))
    for n in lengths.tolist():
        out = net(batch(n))  # LEAK: kept whole through the slice below
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        firsts.append(out[:1].detach())
    return firsts


@case("leak")
def sample_kept_every_tenth_step():
    """An output kept every tenth step for later inspection: the leak grows in jumps."""
    net, samples = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(100000):
        out = net(batch(8192))  # LEAK: one in ten kept below
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            samples.append(out.detach())
    return samples


@case("leak")
def history_grown_with_cat():
    """Each step's outputs appended to a history with torch.cat: a new, longer copy every
    step and the old one freed, so one copy is live at a time."""
    net, history = model(), torch.empty(0, 1024, device="cuda")
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        out, _ = fit(net, opt, batch())
        history = torch.cat([history, out.detach()])  # LEAK: longer every step
    return history


# Loops that no torch.optim optimizer steps: the optimizer step hook never fires, so the
# steps are found some other way (each backward, or each call of the model).
@case("leak")
def manual_sgd_outputs_kept():
    """Plain SGD written out by hand, no torch.optim; each step's output kept in a list."""
    net, outputs = model(), []
    for _ in range(100000):
        out = net(batch())  # LEAK: kept below, one output a step
        out.pow(2).mean().backward()
        with torch.no_grad():
            for p in net.parameters():
                p -= 1e-3 * p.grad
                p.grad = None
        outputs.append(out.detach())
    return outputs


@case("leak")
def evaluation_outputs_kept_on_device():
    """An evaluation script (no backward, no optimizer) that keeps every batch's output on
    the device for a metric at the end."""
    net, outputs = model(), []
    net.eval()
    with torch.inference_mode():
        for _ in range(100000):
            outputs.append(net(batch()))  # LEAK: every output kept on the device
    return outputs


@case("no leak")
def evaluation_outputs_moved_to_host():
    """The same evaluation with each batch's predictions moved to the host: nothing kept
    on the device."""
    net, predictions = model(), []
    net.eval()
    with torch.inference_mode():
        for _ in range(1500):
            predictions.append(net(batch()).argmax(1).cpu())
    return predictions


@case("leak")
def inference_without_no_grad_keeps_predictions():
    """A prediction script that leaves out torch.no_grad() and model.eval(): every output
    keeps its autograd graph (the activations of 4 layers), and the outputs are kept for a
    metric at the end. No optimizer, no backward pass."""
    net, outputs = model(), []
    for _ in range(100000):
        outputs.append(net(batch()))  # LEAK: each output keeps its graph on the device
    return outputs


@case("no leak")
def inference_without_no_grad_moves_predictions_to_host():
    """The same without no_grad() and eval(), each batch's predicted classes moved to the
    host: each graph goes with its output."""
    net, predictions = model(), []
    for _ in range(1500):
        predictions.append(net(batch()).argmax(1).cpu())
    return predictions


@case("leak")
def validation_outputs_gathered_on_device():
    """1,000 training steps, then a validation pass that gathers every batch's output on
    the device for a metric at its end: the outputs outgrow the cap halfway through."""
    net = trained(1000)
    outputs = []
    with torch.no_grad():
        for _ in range(1000):
            outputs.append(net(batch()))  # LEAK: every output kept until the pass ends
    return torch.cat(outputs).mean()


@case("leak")
def every_tenth_generation_kept_after_training():
    """100 training steps, then generation in eval mode under inference_mode for as long
    as it runs, every tenth output kept on the device: what it keeps rises only at every
    tenth call, so the generation is stood in for once it outnumbers the steps before it."""
    net = trained(100)
    samples = []
    with torch.inference_mode():
        for i in range(100000):
            out = net(batch())  # LEAK: every tenth kept below
            if i % 10 == 0:
                samples.append(out)
    return samples


@case("no leak")
def validation_outputs_gathered_then_reduced_each_epoch():
    """Epochs of 200 training steps, each followed by a validation pass of 40 batches whose
    outputs are gathered on the device and reduced to one number when the pass ends: the
    pass holds more at each batch, then gives it all back."""
    def validate(net):
        outputs = [net(batch()) for _ in range(40)]
        return torch.cat(outputs).pow(2).mean().item()
    epochs_then_validation(validate)


@case("no leak")
def validation_outputs_moved_to_host_each_epoch():
    """Epochs of 200 training steps, each followed by a validation pass of 150 batches
    whose predictions go to the host."""
    def validate(net):
        predictions = [net(batch()).argmax(1).cpu() for _ in range(150)]
        return torch.cat(predictions).float().mean().item()
    epochs_then_validation(validate)


@case("leak")
def mixed_precision_output_kept():
    """float16 autocast with a GradScaler whose first steps are skipped (the scale starts
    too high); a float32 copy of each step's output kept."""
    net, kept = model(), []
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 40)
    for _ in range(100000):
        with torch.autocast("cuda", dtype=torch.float16):
            out = net(batch())
            loss = out.float().pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        kept.append(out.detach().float())  # LEAK: a float32 copy a step
    return kept


@case("leak")
def backward_hook_keeps_gradients():
    """A full backward hook that keeps the gradient reaching a layer's output, for a
    gradient-norm plot."""
    net, grads = model(), []
    net[2].register_full_backward_hook(lambda mod, gin, gout: grads.append(gout[0]))
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        loss = net(batch()).pow(2).mean()  # LEAK: its backward makes the gradient kept
        opt.zero_grad()
        loss.backward()
        opt.step()
    return grads


# Patterns from further afield: leaks that rise once an epoch, on a side stream, through a
# compiled model, through kept exceptions, and in a loop with two optimizers.
@case("leak")
def state_dict_snapshots_every_epoch():
    """A copy of the weights kept on the device at the end of every epoch (50 steps), to
    pick the best one later: the leak rises once an epoch, flat between."""
    net, snapshots = model(width=2048), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(100000):
        fit(net, opt, batch(width=2048))
        if step % 50 == 49:
            snapshots.append({k: v.clone() for k, v in net.state_dict().items()})  # LEAK
    return snapshots


@case("no leak")
def best_weights_replaced_when_better():
    """The best weights so far copied whenever the loss improves, the old copy dropped:
    one copy live, replaced at irregular steps (two for a moment)."""
    net, best, best_loss = model(width=2048), None, float("inf")
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(1500):
        _, loss = fit(net, opt, batch(width=2048))
        if loss.item() < best_loss:
            best_loss = loss.item()
            best = {k: v.clone() for k, v in net.state_dict().items()}
    return best


@case("leak")
def prefetched_batches_kept_for_replay():
    """A prefetcher makes the next batch on a side stream while this one trains; every
    batch is then kept in a replay list on the device."""
    net, replay, side = model(), [], torch.cuda.Stream()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def prefetch():
        with torch.cuda.stream(side):
            return torch.randn(2048, 1024, device="cuda")  # LEAK: every batch kept below

    upcoming = prefetch()
    for _ in range(100000):
        torch.cuda.current_stream().wait_stream(side)
        x, upcoming = upcoming, prefetch()
        x.record_stream(torch.cuda.current_stream())
        fit(net, opt, x)
        replay.append(x)
    return replay


@case("leak")
def compiled_model_outputs_kept():
    """A torch.compile'd model whose outputs are kept for a metric at the end: the output
    is allocated by the code Inductor generates, not by the script's own line."""
    net, outputs = torch.compile(model()), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        out = net(batch())  # LEAK: kept below
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        outputs.append(out.detach())
    return outputs


@case("leak")
def skipped_batches_keep_their_exceptions():
    """Batches whose loss went up are skipped by raising; the exceptions are kept for a
    summary, and each one's traceback keeps its frame: the output and its graph."""
    net, skipped, last = model(), [], [float("inf")]
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def train_step(x):
        out = net(x)  # LEAK: kept by the frame of each exception kept below
        loss = out.pow(2).mean()
        if loss.item() > last[0]:
            raise FloatingPointError(f"loss went up to {loss.item():.4g}")
        last[0] = loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(100000):
        try:
            train_step(batch())
        except FloatingPointError as err:
            skipped.append(err)
    return skipped


@case("leak")
def gan_generated_samples_kept():
    """A GAN: generator and discriminator, an optimizer each, both stepped every
    iteration; each iteration's generated batch kept for a progress grid."""
    torch.manual_seed(0)
    gen = torch.nn.Sequential(torch.nn.Linear(128, 1024), torch.nn.ReLU(),
                              torch.nn.Linear(1024, 1024)).cuda()
    disc = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.LeakyReLU(0.2),
                               torch.nn.Linear(1024, 1)).cuda()
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce, grid = torch.nn.BCEWithLogitsLoss(), []
    ones = torch.ones(1024, 1, device="cuda")
    zeros = torch.zeros(1024, 1, device="cuda")
    for _ in range(100000):
        fake = gen(torch.randn(1024, 128, device="cuda"))  # LEAK: kept below
        d_loss = bce(disc(batch(1024)), ones) + bce(disc(fake.detach()), zeros)
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        g_loss = bce(disc(fake), ones)
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
        grid.append(fake.detach())
    return grid


# Patterns added after the rules above were written, to check them on scripts they were
# not tuned to: a tiny leak, a memoised helper, a leak inside a module's own forward, a
# leak once an epoch through a scheduler, healthy growth within a sample, and a peak that
# comes from the optimizer's first step.
@case("leak")
def losses_appended_as_tensors():
    """Each step's loss appended as a tensor for a plot at the end: backward frees the
    graph, so 512 bytes a step stay on the device."""
    net, losses = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(3000):
        loss = net(batch(512)).pow(2).mean()  # LEAK: kept below
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss)
    return losses


@case("leak")
def frozen_encoder_features_cached_by_index():
    """A frozen encoder's features memoised with functools.lru_cache by sample index, to
    save recomputing them next epoch: the dataset does not fit, so the cache grows every
    step until the device is full."""
    encoder, head = model(), model()
    opt = torch.optim.SGD(head.parameters(), lr=1e-3)

    @functools.lru_cache(maxsize=None)
    def features(index):
        with torch.no_grad():
            return encoder(batch())  # LEAK: every index's features cached

    for index in range(100000):
        fit(head, opt, features(index))


class AttentionKeepingMaps(torch.nn.Module):
    """Self-attention that keeps each call's attention map for a plot."""

    def __init__(self, width=512):
        super().__init__()
        self.qkv, self.out, self.maps = torch.nn.Linear(width, 3 * width), \
            torch.nn.Linear(width, width), []

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attn = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, -1)  # LEAK
        self.maps.append(attn.detach())
        return self.out(attn @ v)


@case("leak", leak_in=AttentionKeepingMaps)
def attention_maps_kept_by_module():
    net = with_head(AttentionKeepingMaps, 512)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    for _ in range(100000):
        loss = net(torch.randn(8, 256, 512, device="cuda")).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@case("leak")
def optimizer_rebuilt_each_epoch():
    """A fresh AdamW and cosine schedule each epoch (warm restarts); the schedulers are
    kept in a list to log their rates, and each keeps its optimizer's moments alive."""
    net, schedulers = model(width=2048), []
    for _ in range(100000):
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        schedulers.append(torch.optim.lr_scheduler.CosineAnnealingLR(opt, 50))
        for _ in range(50):
            loss = net(batch(width=2048)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()  # LEAK: each epoch's moments, kept by its scheduler
            schedulers[-1].step()


@case("no leak")
def generation_with_growing_kv_cache():
    """Sampling after training: each sample's key/value cache grows by one position a
    token (torch.cat) and is dropped when the sample ends."""
    net = trained(200)
    with torch.no_grad():
        for sample in range(150):
            cache, x = torch.empty(64, 0, 1024, device="cuda"), torch.randn(
                64, 1, 1024, device="cuda")
            for _ in range(128):
                cache = torch.cat([cache, net(x)], dim=1)
                weights = torch.softmax(cache @ x.transpose(1, 2), dim=1)
                x = (weights.transpose(1, 2) @ cache) / 32
            if sample % 50 == 0:
                print(f"sample {sample}: {x.norm().item():.3f}")


@case("genuine peak")
def adam_moments_do_not_fit():
    """Forward and backward fit; the first optimizer step does not: AdamW makes two
    moments as large as the weights."""
    net = model(width=8192, depth=5)  # LEAK: the weights the moments double (a peak)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    for _ in range(100):
        fit(net, opt, batch(256, 8192))


# A second set written after the rules, run before any change to them.
@case("leak")
def metric_with_grad_summed_for_logging():
    """A training metric summed for the epoch's log without detach(): its graph is never
    backpropagated, so the difference that abs() saved stays alive every step."""
    net, running_l1 = model(), 0.0
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        x = batch()
        out = net(x)
        loss = (out - x).pow(2).mean()
        running_l1 = running_l1 + (out - x).abs().mean()  # LEAK: abs() keeps out - x
        opt.zero_grad()
        loss.backward()
        opt.step()
    return running_l1


@case("leak")
def per_class_outputs_by_mask():
    """Outputs kept per class for a confusion plot, picked with a boolean mask: a
    different number of rows every step and class."""
    net, per_class = model(), collections.defaultdict(list)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        x = batch()
        labels = torch.randint(0, 10, (x.shape[0],), device="cuda")
        out, _ = fit(net, opt, x)
        for c in range(3):
            per_class[c].append(out[labels == c].detach())  # LEAK: kept per class
    return per_class


@case("leak")
def outputs_thinned_by_logger_thread():
    """A logging thread takes each step's output from a queue and keeps a thinned
    half-precision copy for a plot at the end: the leak is allocated on that thread."""
    import queue
    import threading
    net, todo, kept = model(), queue.Queue(maxsize=4), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def logger():
        while (out := todo.get()) is not None:
            kept.append(out[::8].half())  # LEAK: a thinned copy a step, on this thread

    threading.Thread(target=logger, daemon=True).start()
    for _ in range(100000):
        out, _ = fit(net, opt, batch(4096))
        todo.put(out.detach(), timeout=30)  # a logger that died stops training too
    todo.put(None)


@case("no leak")
def gradient_checkpointing():
    """Activation checkpointing (non-reentrant) over each block: activations are
    recomputed in backward, so memory rises and falls within the step."""
    from torch.utils.checkpoint import checkpoint
    net = model(width=2048, depth=6)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    for step in range(600):
        h = batch(4096, 2048)
        for i in range(0, len(net), 2):
            h = checkpoint(net[i:i + 2], h, use_reentrant=False)
        loss = h.pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


@case("no leak")
def dataloader_workers_with_pinned_memory():
    """A DataLoader with two worker processes (CPU only) and pinned memory, batches moved
    with non_blocking=True: nothing kept between steps."""
    data = torch.utils.data.TensorDataset(torch.randn(20000, 1024), torch.randn(20000, 1024))
    loader = torch.utils.data.DataLoader(data, batch_size=512, shuffle=True, num_workers=2,
                                         pin_memory=True, persistent_workers=True)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for epoch in range(20):
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = (net(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


@case("no leak")
def teacher_outputs_cached_for_one_epoch_of_batches():
    """Distillation: the teacher's outputs cached on the device by batch index over a
    dataset of 150 batches, reused every later epoch: the cache fills in the first epoch,
    then holds."""
    teacher, student = trained(50), model()
    opt = torch.optim.SGD(student.parameters(), lr=1e-3)
    cache, inputs = {}, torch.Generator(device="cuda")
    for epoch in range(5):
        for index in range(150):
            inputs.manual_seed(index)
            x = torch.randn(1024, 1024, device="cuda", generator=inputs)
            if index not in cache:
                with torch.no_grad():
                    cache[index] = teacher(x)
            loss = (student(x) - cache[index]).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")



# A third set written after the rules, run before any change to them: CUDA graphs, a
# side stream, a Dataset, a thread pool, a peak in evaluation, the cache emptied every
# step and a leak at random steps.
def graphed_training_step(net, opt, x, y, side=None):
    """The whole training step captured in one CUDA graph, as PyTorch's CUDA graphs
    notes show it: a few warm-up steps on a side stream, then capture. A new side stream
    each call would keep a cuBLAS workspace for each (PyTorch frees them never)."""
    side = side or torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            (net(x) - y).pow(2).mean().backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        out = net(x)
        loss = (out - y).pow(2).mean()
        loss.backward()
        opt.step()
    return graph, out, loss


@case("no leak")
def cuda_graph_whole_step():
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    x, y = batch(), batch()
    graph, _, loss = graphed_training_step(net, opt, x, y)
    for step in range(3000):
        x.copy_(torch.randn_like(x))
        y.copy_(torch.randn_like(y))
        graph.replay()
        if step % 500 == 0:
            print(f"step {step} loss {loss.item():.4f}")


@case("leak")
def cuda_graph_predictions_cloned_and_kept():
    """A graphed step whose static output is cloned each replay, to score the epoch at
    its end: the clones pile up outside the graph's pool."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    x, y = batch(), batch()
    graph, out, _ = graphed_training_step(net, opt, x, y)
    predictions = []
    for _ in range(100000):
        x.copy_(torch.randn_like(x))
        graph.replay()
        predictions.append(out.clone())  # LEAK: a clone a replay, kept


@case("leak")
def side_stream_copies_kept():
    """Each step's output copied to half precision on a side stream, so the copy
    overlaps the next step, and kept for an average at the end."""
    net, side, copies = model(), torch.cuda.Stream(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        out, _ = fit(net, opt, batch())
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            copies.append(out.detach().half())  # LEAK: made on the side stream, kept
        out.record_stream(side)


@case("no leak")
def auxiliary_loss_on_a_stream_made_each_step():
    """An auxiliary head runs on a side stream made inside the loop, to overlap the main
    forward. PyTorch hands out its pool's 32 streams in turn, and cuBLAS keeps a
    workspace for each stream it ran on: memory grows for 32 steps, then stays."""
    net, head = model(), torch.nn.Linear(1024, 256).cuda()
    opt = torch.optim.SGD(list(net.parameters()) + list(head.parameters()), lr=1e-3)
    for _ in range(600):
        x = batch()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            aux = head(x).pow(2).mean()
        torch.cuda.current_stream().wait_stream(side)
        loss = net(x).pow(2).mean() + 0.1 * aux
        opt.zero_grad()
        loss.backward()
        opt.step()


class DeviceCachingDataset(torch.utils.data.Dataset):
    """A Dataset that makes each sample on the device and caches it, so the next epoch
    is faster: the dataset is larger than the device."""

    def __init__(self, length):
        self.length, self.cache = length, {}

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if index not in self.cache:
            self.cache[index] = torch.randn(64, 1024, device="cuda")  # LEAK: cached
        return self.cache[index]


@case("leak", leak_in=DeviceCachingDataset)
def dataset_caches_device_tensors():
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(DeviceCachingDataset(10 ** 7), batch_size=32)
    for x in loader:
        fit(net, opt, x.flatten(0, 1))


@case("genuine peak")
def retrieval_scores_do_not_fit():
    """Training fits; the retrieval evaluation after it scores every item against every
    other in one matrix multiply, larger than the device."""
    net = trained(300)
    with torch.no_grad():
        items = torch.cat([net(batch()) for _ in range(20)])
        scores = items @ items.T  # LEAK: the one request past the device (a peak)
        print("recall@1", (scores.argmax(1) == torch.arange(len(items), device="cuda"))
              .float().mean().item())


@case("leak")
def thread_pool_augmentations_kept():
    """Augmentation on the device in a thread pool, a batch ahead; the futures are kept
    in a list to check for errors at the end, and each keeps its result."""
    from concurrent.futures import ThreadPoolExecutor
    net, futures = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def augment(x):
        return x + 0.1 * torch.randn_like(x)  # LEAK: each result kept by its future

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures.append(pool.submit(augment, batch()))
        for _ in range(100000):
            futures.append(pool.submit(augment, batch()))
            fit(net, opt, futures[-2].result())


@case("no leak")
def cache_emptied_every_step():
    """torch.cuda.empty_cache() after every step, as some scripts do to "save memory",
    with memory_allocated() logged."""
    net = model()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    for step in range(1500):
        fit(net, opt, batch(1024 + 512 * (step % 5)))
        torch.cuda.empty_cache()
        if step % 300 == 0:
            print(f"step {step}: {torch.cuda.memory_allocated() / MiB:.0f} MiB allocated")


@case("leak")
def hard_examples_kept_for_replay():
    """Hard example mining: a batch whose loss is above the running mean is kept to be
    replayed at the end of the epoch, which never comes: about half the steps keep one."""
    net, hard, mean = model(), [], None
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        x = batch() * (1 + torch.rand((), device="cuda"))  # LEAK: kept when hard
        _, loss = fit(net, opt, x)
        value = loss.item()
        mean = value if mean is None else 0.99 * mean + 0.01 * value
        if value > mean:
            hard.append(x)  # never replayed



# A fourth set, written and run before any change: autocast around the whole loop, a
# leak that only runs out at a larger evaluation, batches of random length for a long
# run, and two models trained on two threads at once.
@case("no leak")
def autocast_around_the_whole_loop():
    """bf16 autocast entered once around the whole loop, not just the forward: its cache
    of cast weights lives as long as the context."""
    net = model(width=2048)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for step in range(1500):
            _, loss = fit(net, opt, batch(2048, 2048))
            if step % 300 == 0:
                print(f"step {step} loss {loss.item():.4f}")


@case("leak")
def leak_surfaces_at_a_larger_evaluation():
    """300 training steps, each keeping a half-precision copy of its output for a plot;
    then an evaluation that scores 25,000 items against each other, which fits the device
    alone but not beside what the training kept."""
    net, kept = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(300):
        out, _ = fit(net, opt, batch(3072))
        kept.append(out.detach().half())  # LEAK: 6 MiB a step, kept for the plot
    with torch.no_grad():
        items = torch.cat([net(batch(2500)) for _ in range(10)])
        scores = items @ items.T
        print("recall@1", (scores.argmax(1) == torch.arange(len(items), device="cuda"))
              .float().mean().item())
    return kept


@case("no leak")
def batches_of_random_length_for_a_long_run():
    """3,000 steps of batches from 256 to 8,192 rows at random: each step's peak differs
    by up to 32 times, nothing is kept."""
    net = model()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    lengths = torch.randint(256, 8193, (3000,), generator=torch.Generator().manual_seed(1))
    for step, n in enumerate(lengths.tolist()):
        _, loss = fit(net, opt, batch(n))
        if step % 500 == 0:
            print(f"step {step} loss {loss.item():.4f}")


@case("leak")
def two_models_trained_on_threads_one_keeps_outputs():
    """Two models trained at once on two threads, each with its own optimizer and stream
    (a pair of learning rates compared); one thread keeps each step's output."""
    import threading
    errors = []

    def train(keep, lr):
        try:
            net, kept, stream = model(), [], torch.cuda.Stream()
            opt = torch.optim.SGD(net.parameters(), lr=lr)
            with torch.cuda.stream(stream):
                for _ in range(100000):
                    if errors:
                        return
                    out, _ = fit(net, opt, batch())
                    if keep:
                        kept.append(out.detach().half())  # LEAK: 4 MiB a step, kept
        except BaseException as e:  # noqa: BLE001 (raised again on the main thread)
            errors.append(e)

    threads = [threading.Thread(target=train, args=(keep, lr))
               for keep, lr in ((False, 1e-3), (True, 1e-2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]



# A fifth set, written and run before any change: a double backward, layers unfrozen in
# stages, a bounded queue of keys, a model too large to load, L-BFGS's closure, multi-scale
# convolutions with cuDNN's benchmark, sparse embedding gradients, and a loader cycled.
@case("leak")
def gradient_penalty_norms_kept():
    """A gradient penalty on the inputs (a double backward, create_graph=True); each
    step's per-sample gradient norms are kept for a histogram at the end: 16 KiB a step,
    far from an OOM."""
    net, norms = model(), []
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    for _ in range(3000):
        x = batch(4096).requires_grad_()
        out = net(x)
        grad, = torch.autograd.grad(out.sum(), x, create_graph=True)
        norm = grad.norm(2, dim=1)  # LEAK: kept below, 16 KiB a step
        loss = out.pow(2).mean() + (norm - 1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        norms.append(norm.detach())
    return norms


@case("no leak")
def gradual_unfreezing():
    """A frozen stack fine-tuned from the top down: every 300 steps the next layer is
    unfrozen and added to AdamW, whose moments for it are made at its next step, and
    backward keeps more activations. Memory rises six times, then holds."""
    net = model(width=2048, depth=6)
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    net.requires_grad_(False)
    opt = None
    for step in range(2400):
        stage = step // 300
        if step % 300 == 0 and stage < len(linears):
            layer = linears[-1 - stage].requires_grad_(True)
            if opt is None:
                opt = torch.optim.AdamW(layer.parameters(), lr=1e-4)
            else:
                opt.add_param_group({"params": list(layer.parameters())})
        _, loss = fit(net, opt, batch(2048, 2048))
        if step % 300 == 299:
            print(f"stage {stage} loss {loss.item():.4f}")


@case("no leak")
def key_queue_bounded_by_slicing():
    """A MoCo-style queue: each step's keys go in front and the queue is cut to 65,536
    rows, so it grows for 32 steps and then holds its size."""
    net, queue = model(), torch.empty(0, 1024, device="cuda")
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(1500):
        out, _ = fit(net, opt, batch())
        queue = torch.cat([out.detach(), queue])[:65536]
        if step % 300 == 0:
            print(f"step {step}: queue of {len(queue)}")


class Recommender(torch.nn.Module):
    def __init__(self, users, items, dim=256):
        super().__init__()
        self.users = torch.nn.Embedding(users, dim)
        self.items = torch.nn.Embedding(items, dim)  # LEAK: past the device (a peak)

    def forward(self, user, item):
        return (self.users(user) * self.items(item)).sum(1)


@case("genuine peak", leak_in=Recommender)
def embedding_tables_too_large_to_load():
    """A recommender built on the device (`with torch.device("cuda")`): its two
    embedding tables alone are larger than the device, so the OOM comes while the model
    is built, before any step."""
    with torch.device("cuda"):
        net = Recommender(3_000_000, 2_000_000)
    opt = torch.optim.SparseAdam(net.parameters(), lr=1e-3)
    for _ in range(100):
        user = torch.randint(0, 3_000_000, (4096,), device="cuda")
        loss = net(user, user % 2_000_000).sigmoid().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@case("leak")
def lbfgs_closure_keeps_outputs():
    """L-BFGS on a small model with a large batch calls its closure several times a step
    (each a forward and a backward); the closure keeps every output for a plot. L-BFGS's
    own history (100 steps of two parameter-sized vectors, 2 MiB a step) fills up too."""
    net, outputs = model(width=256), []
    opt = torch.optim.LBFGS(net.parameters(), lr=0.1, max_iter=4)
    x = batch(8192, 256)

    def closure():
        opt.zero_grad()
        out = net(x)  # LEAK: kept below, each call of the closure
        loss = out.pow(2).mean()
        loss.backward()
        outputs.append(out.detach())
        return loss

    for _ in range(100000):
        opt.step(closure)


@case("no leak")
def multiscale_convolutions_with_cudnn_benchmark():
    """Multi-scale training of a small convolutional net with cudnn.benchmark on: five
    image sizes drawn at random, each tried against cuDNN's algorithms (and their
    workspaces) the first time it comes, channels_last, bf16 autocast."""
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU()]
    for _ in range(4):
        layers += [torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.BatchNorm2d(64),
                   torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    sizes = torch.randint(0, 5, (1500,), generator=torch.Generator().manual_seed(2))
    for step, s in enumerate(sizes.tolist()):
        side = 96 + 32 * s
        x = torch.randn(16, 3, side, side, device="cuda").to(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = net(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 300 == 0:
            print(f"step {step} at {side}px loss {loss.item():.4f}")


@case("no leak")
def sparse_embedding_gradients():
    """A large embedding trained with sparse gradients and SparseAdam: each step's
    gradient holds as many rows as the batch has distinct ids, so every size differs."""
    torch.manual_seed(0)
    table = torch.nn.Embedding(1_000_000, 128, sparse=True).cuda()
    head = torch.nn.Linear(128, 1).cuda()
    opt = torch.optim.SparseAdam(table.parameters(), lr=1e-3)
    opt_head = torch.optim.Adam(head.parameters(), lr=1e-3)
    for step in range(3000):
        n = int(torch.randint(1024, 65536, ()).item())
        ids = torch.randint(0, 1_000_000, (n,), device="cuda")
        loss = head(table(ids)).pow(2).mean()
        opt.zero_grad()
        opt_head.zero_grad()
        loss.backward()
        opt.step()
        opt_head.step()
        if step % 500 == 0:
            print(f"step {step} loss {loss.item():.4f}")


def device_batches(n=2048):
    """An endless stream of unlabeled batches, made on the device."""
    while True:
        yield torch.randn(n, 1024, device="cuda")  # LEAK: each one saved by cycle()


@case("leak", leak_in=device_batches)
def unlabeled_stream_cycled():
    """Semi-supervised training pairs each labeled batch with an unlabeled one from
    `itertools.cycle`, which saves every item of its first pass to replay them: on an
    endless stream the first pass never ends."""
    import itertools
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    unlabeled = itertools.cycle(device_batches())
    for _ in range(100000):
        out, loss = fit(net, opt, batch())
        consistency = net(next(unlabeled)).pow(2).mean()
        opt.zero_grad()
        consistency.backward()
        opt.step()



# A sixth set, written and run before any change: a leak that begins after a warm-up,
# gradient hooks added every step, an optimizer of the script's own that keeps its
# updates, progressive resizing, and outputs held in reference cycles, with the cycle
# collector off and on.
@case("leak")
def outputs_kept_after_warm_up():
    """600 steps of warm-up keep nothing; from then on each step's output is kept for an
    ensemble of late predictions."""
    net, late = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(100000):
        x = batch()
        out = net(x)  # LEAK: kept below once the warm-up is over
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= 600:
            late.append(out.detach())


@case("leak")
def gradient_hooks_registered_every_step():
    """Gradient dropout written as a hook on each parameter, registered anew every step
    and never removed: every hook keeps its mask, and all of them run at each backward."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        for p in net.parameters():
            mask = torch.rand_like(p) > 0.1  # LEAK: kept by the hook below, every step
            p.register_hook(lambda g, mask=mask: g * mask)
        fit(net, opt, batch())


class SGDKeepingUpdates(torch.optim.Optimizer):
    """Plain SGD written as an optimizer of the script's own, which keeps every update
    in its state to plot their norms later."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                update = -group["lr"] * p.grad  # LEAK: kept in the state, every step
                self.state[p].setdefault("updates", []).append(update)
                p.add_(update)


@case("leak", leak_in=SGDKeepingUpdates)
def optimizer_of_its_own_keeps_updates():
    net = model()
    opt = SGDKeepingUpdates(net.parameters(), lr=1e-3)
    for _ in range(100000):
        fit(net, opt, batch())


@case("no leak")
def progressive_resizing_that_fits():
    """The batch grows from 512 to 8,192 rows in five stages of 300 steps (progressive
    resizing): each stage's steps need more, nothing is kept."""
    net = model()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    for stage, n in enumerate((512, 1024, 2048, 4096, 8192)):
        for _ in range(300):
            _, loss = fit(net, opt, batch(n))
        print(f"stage {stage} at {n} rows: loss {loss.item():.4f}")


class StepRecord:
    """A step's record for a dashboard, linked both ways with the trainer's log entry:
    a reference cycle, freed only by Python's cycle collector."""

    def __init__(self, output):
        self.output = output
        self.entry = {"record": self}


@case("leak")
def outputs_in_reference_cycles_with_the_collector_off():
    """gc.disable() for speed, as some training scripts do; each step's output sits in a
    reference cycle, which nothing frees with the collector off."""
    import gc
    gc.disable()
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        out = net(batch())  # LEAK: held by a cycle below that is never collected
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        StepRecord(out.detach())


@case("no leak")
def outputs_in_reference_cycles_left_to_the_collector():
    """The same records in reference cycles with the collector on: memory rises between
    its collections and falls at each, and nothing stays."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(2000):
        out, loss = fit(net, opt, batch(512))
        StepRecord(out.detach())
        if step % 400 == 0:
            print(f"step {step} loss {loss.item():.4f}")



# A seventh set: loops that no optimizer step, backward pass or model call marks, as
# scientific and functional code writes them.
def kmeans(keep_history, iterations):
    """Lloyd's k-means on the device in plain tensor operations: no module, no autograd."""
    g = torch.Generator(device="cuda").manual_seed(0)
    points = torch.randn(200_000, 64, device="cuda", generator=g)
    centroids = points[:256].clone()
    history = []
    for it in range(iterations):
        distances = torch.cdist(points, centroids)
        nearest = distances.min(1)  # LEAK: its distances kept below, 800 KB a pass
        sums = torch.zeros_like(centroids).index_add_(0, nearest.indices, points)
        counts = torch.bincount(nearest.indices, minlength=len(centroids)).clamp_(min=1)
        centroids = sums / counts.unsqueeze(1)
        if keep_history:
            history.append(nearest.values)
        elif it % 500 == 0:
            print(f"pass {it}: inertia {nearest.values.pow(2).sum().item():.1f}")
    return centroids, history


@case("leak", leak_in=kmeans)
def kmeans_keeps_every_pass_distances():
    """Each pass's distances to the nearest centroid kept to plot convergence."""
    kmeans(keep_history=True, iterations=100000)


@case("no leak")
def kmeans_keeps_nothing():
    kmeans(keep_history=False, iterations=3000)


@case("leak")
def functional_training_keeps_predictions():
    """A model as a plain function of a dict of tensors, trained with torch.func.grad
    and an update written out (no nn.Module, no backward call, no torch.optim); each
    step's predictions kept."""
    from torch.func import grad
    torch.manual_seed(0)
    params = {"w1": torch.randn(1024, 1024, device="cuda") * 0.03,
              "w2": torch.randn(1024, 1024, device="cuda") * 0.03}

    def forward(p, x):
        return torch.relu(x @ p["w1"]) @ p["w2"]

    def loss(p, x):
        return forward(p, x).pow(2).mean()

    predictions = []
    for _ in range(100000):
        x = batch()
        grads = grad(loss)(params, x)
        with torch.no_grad():
            for name in params:
                params[name] -= 1e-3 * grads[name]
            predictions.append(forward(params, x))  # LEAK: 8 MiB a step, kept


# An eighth set, more loops that nothing marks: simulations and solvers in plain tensor
# operations.
@case("leak")
def nbody_keeps_its_trajectory():
    """An n-body simulation stepped with plain tensor operations; every step's positions
    kept on the device to plot the orbits afterwards."""
    g = torch.Generator(device="cuda").manual_seed(0)
    pos = torch.randn(100_000, 3, device="cuda", generator=g)
    vel = torch.zeros_like(pos)
    centers = torch.randn(64, 3, device="cuda", generator=g)
    trajectory = []
    for t in range(200_000):
        delta = centers.unsqueeze(0) - pos.unsqueeze(1)  # 100k x 64 x 3
        dist3 = delta.pow(2).sum(-1).add_(1e-2).pow(1.5)
        vel = vel + 1e-4 * (delta / dist3.unsqueeze(-1)).sum(1)
        pos = pos + 1e-3 * vel
        trajectory.append(pos.clone())  # LEAK: 1.2 MB a step, kept
        if t % 1000 == 0:
            print(f"t {t}: spread {pos.std().item():.3f}")


@case("no leak")
def power_iteration_keeps_nothing():
    """The largest eigenvalue of a matrix by power iteration: each pass's vector replaces
    the last."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(8192, 8192, device="cuda", generator=g)
    a = a @ a.T / 8192
    v = torch.randn(8192, 1, device="cuda", generator=g)
    for it in range(4000):
        w = a @ v
        v = w / w.norm()
        if it % 500 == 0:
            print(f"pass {it}: eigenvalue {(v.T @ a @ v).item():.4f}")


@case("no leak")
def jacobi_keeps_the_last_residuals():
    """A Jacobi solver keeping the last 16 residual fields for a convergence plot (a
    bounded deque: memory that fills up and stops)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    u = torch.zeros(4096, 4096, device="cuda")
    f = torch.randn(4096, 4096, device="cuda", generator=g)
    recent = collections.deque(maxlen=16)
    for it in range(3000):
        inner = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - f[1:-1, 1:-1])
        residual = inner - u[1:-1, 1:-1]
        u = torch.nn.functional.pad(inner, (1, 1, 1, 1))
        recent.append(residual)
        if it % 500 == 0:
            print(f"pass {it}: residual {residual.abs().max().item():.3e}")


@case("genuine peak")
def sinkhorn_on_too_many_points():
    """Sinkhorn's optimal transport between two point clouds whose cost matrix alone is
    larger than the device's cap: it runs out in its first pass."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(40_000, 16, device="cuda", generator=g)
    y = torch.randn(40_000, 16, device="cuda", generator=g)
    cost = torch.cdist(x, y)  # 6.4 GB of float32
    k = torch.exp(-cost / 0.1)
    a = torch.ones(40_000, device="cuda")
    for it in range(100):
        b = 1 / (k.T @ a)
        a = 1 / (k @ b)
    print((a.sum() * b.sum()).item())


# A ninth set, written when a session's device time was spent (run in the next): memory
# kept through CUDA graph pools, module buffers and a cache.
@case("leak")
def graphs_recaptured_each_epoch_and_kept():
    """The training step captured in a CUDA graph anew each epoch (its learning rate
    baked in), and every epoch's graph kept in a dict by epoch: each holds its own
    memory pool and static tensors. One side stream for all the warm-ups: the first run
    made one per epoch, whose cuBLAS workspaces (65 MiB each) outgrew the graphs' pools."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    x, y = batch(), batch()
    side = torch.cuda.Stream()
    graphs = {}
    for epoch in range(10000):
        for group in opt.param_groups:
            group["lr"] = 1e-3 * 0.99 ** epoch
        graphs[epoch] = graphed_training_step(net, opt, x, y, side)  # LEAK: a graph an epoch
        graph, out, loss = graphs[epoch]
        for _ in range(20):
            x.copy_(torch.randn_like(x))
            graph.replay()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


# A tenth set, written with the graph pools' notes: graphs replaced in time, and graphs
# that share one pool, are no leak.
@case("no leak")
def graphs_recaptured_each_epoch_and_replaced():
    """The step captured anew each epoch with that epoch's learning rate, the graph
    before it dropped: each released pool's memory comes back."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    x, y = batch(), batch()
    side = torch.cuda.Stream()
    for epoch in range(150):
        for group in opt.param_groups:
            group["lr"] = 1e-3 * 0.99 ** epoch
        graph, out, loss = graphed_training_step(net, opt, x, y, side)
        for _ in range(20):
            x.copy_(torch.randn_like(x))
            graph.replay()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


@case("no leak")
def inference_graphs_per_batch_size_share_a_pool():
    """Serving: one inference graph per batch-size bucket, captured when a bucket is
    first seen, all in one shared pool, replayed for 3,000 requests of random size."""
    net = model().eval()
    pool, graphs = torch.cuda.graph_pool_handle(), {}
    sizes = torch.randint(1, 4097, (3000,), generator=torch.Generator().manual_seed(2))
    total = 0.0
    with torch.no_grad():
        for n in sizes.tolist():
            bucket = 1 << max(6, (n - 1).bit_length())
            if bucket not in graphs:
                static_in = torch.zeros(bucket, 1024, device="cuda")
                net(static_in)  # warm-up outside the capture
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    static_out = net(static_in)
                graphs[bucket] = graph, static_in, static_out
            graph, static_in, static_out = graphs[bucket]
            static_in[:n].copy_(torch.randn(n, 1024, device="cuda"))
            graph.replay()
            total += static_out[:n].sum().item()
    print(f"served {len(sizes)} requests, {len(graphs)} graphs, sum {total:.1f}")


# An eleventh set, written after the graph pools' notes and run before any change for
# them: graphs made by make_graphed_callables, a model compiled with CUDA graphs, and a
# reinforcement-learning replay buffer kept two ways.
def train_graphed(graphed, x, steps=20):
    """A few steps of a module graphed by make_graphed_callables."""
    opt = torch.optim.SGD(graphed.parameters(), lr=1e-3)
    for _ in range(steps):
        x.copy_(torch.randn_like(x))
        loss = graphed(x).pow(2).mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
    return loss


@case("leak")
def graphed_snapshots_kept_for_an_ensemble():
    """Snapshot ensembling: each epoch trains a copy of the model graphed by
    make_graphed_callables (a forward and a backward graph sharing one pool), and keeps
    every epoch's graphed copy to average their predictions at the end."""
    base, x, snapshots = model(), batch(), []
    for epoch in range(10000):
        graphed = torch.cuda.make_graphed_callables(copy.deepcopy(base), (x,))  # LEAK: kept
        loss = train_graphed(graphed, x)
        snapshots.append(graphed)
        base.load_state_dict(graphed.state_dict())
        print(f"epoch {epoch}: loss {loss.item():.4f}, {len(snapshots)} snapshots")


@case("leak")
def graphed_copy_replaced_each_epoch():
    """Each epoch graphs a fresh copy of the model, trains it and carries its weights
    over; the copy before is dropped. Written as no leak, and it is one: a module graphed
    by make_graphed_callables refers to itself (its new forward calls the old one), so a
    dropped copy, its graphs and their pools wait for the cycle collector's full pass,
    which the run never reaches before its memory is gone."""
    base, x = model(), batch()
    for epoch in range(120):
        graphed = torch.cuda.make_graphed_callables(copy.deepcopy(base), (x,))  # LEAK: cycle
        loss = train_graphed(graphed, x)
        base.load_state_dict(graphed.state_dict())
        print(f"epoch {epoch}: loss {loss.item():.4f}")


@case("no leak")
def compiled_with_cuda_graphs_over_three_batch_sizes():
    """torch.compile(mode="reduce-overhead"): CUDA graphs recorded for each batch size
    seen (three, taken at random), in the compiler's pool; 600 steps."""
    net = torch.compile(model(), mode="reduce-overhead")
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    sizes, pick = [512, 1024, 2048], torch.Generator().manual_seed(3)
    for step in range(600):
        n = sizes[int(torch.randint(3, (1,), generator=pick))]
        loss = net(batch(n)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step}: loss {loss.item():.4f}")


def q_learning_step(q, target, opt, obs, action, reward, next_obs):
    with torch.no_grad():
        y = reward + 0.99 * target(next_obs).max(dim=1).values
    loss = (q(obs).gather(1, action[:, None]).squeeze(1) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


@case("leak")
def replay_buffer_of_transitions_kept_on_the_device():
    """DQN: each step's transition (observations, action, reward, next observations)
    appended to a Python list on the device and sampled from; nothing ever leaves it."""
    q = model()
    target, buffer = copy.deepcopy(q), []
    opt = torch.optim.Adam(q.parameters(), lr=1e-4)
    obs = torch.randn(256, 1024, device="cuda")
    for step in range(100000):
        with torch.no_grad():
            action = q(obs).argmax(dim=1)
        next_obs = torch.randn(256, 1024, device="cuda")  # LEAK: kept in the buffer below
        reward = torch.randn(256, device="cuda")
        buffer.append((obs, action, reward, next_obs))
        obs = next_obs
        sample = buffer[int(torch.randint(len(buffer), (1,)))]
        q_learning_step(q, target, opt, *sample)
        if step % 200 == 0:
            target.load_state_dict(q.state_dict())


@case("no leak")
def replay_buffer_preallocated_as_a_ring():
    """DQN with its replay buffer allocated once on the device, 800 transitions,
    written round by index and sampled from: 3,000 steps, so it wraps."""
    q, capacity = model(), 800
    target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), lr=1e-4)
    observations = torch.empty(capacity + 1, 256, 1024, device="cuda")
    actions = torch.zeros(capacity, 256, dtype=torch.long, device="cuda")
    rewards = torch.zeros(capacity, 256, device="cuda")
    observations[0].normal_()
    for step in range(3000):
        slot = step % capacity
        with torch.no_grad():
            actions[slot] = q(observations[slot]).argmax(dim=1)
        observations[slot + 1].normal_()
        rewards[slot].normal_()
        i = int(torch.randint(min(step + 1, capacity), (1,)))
        q_learning_step(q, target, opt, observations[i], actions[i], rewards[i],
                        observations[i + 1])
        if step % 200 == 0:
            target.load_state_dict(q.state_dict())


class MaskRecordingNet(torch.nn.Module):
    """Dropout whose masks are registered as buffers, one per step, so that a run can
    be replayed exactly: the module's state grows every step."""

    def __init__(self):
        super().__init__()
        self.body, self.steps = model(), 0

    def forward(self, x):
        self.steps += 1
        mask = torch.bernoulli(torch.full_like(x, 0.9))  # LEAK: registered below, kept
        self.register_buffer(f"mask_{self.steps}", mask)
        return self.body(x * mask / 0.9)


@case("leak", leak_in=MaskRecordingNet)
def dropout_masks_registered_as_buffers():
    net = MaskRecordingNet()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        fit(net, opt, batch())


@functools.lru_cache(maxsize=None)
def position_table(length, width=1024):
    """Sinusoidal positions for one sequence length, made once on the device."""
    pos = torch.arange(length, device="cuda", dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, width, 2, device="cuda") * (-9.2 / width))
    table = torch.zeros(length, width, device="cuda")
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return table


@case("no leak")
def position_tables_cached_by_length():
    """Batches of 64 lengths at random, each with its positions from an unbounded
    lru_cache: it fills with one table per length in the first few hundred steps, then
    stops."""
    net = model()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    lengths = torch.randint(1, 65, (1500,), generator=torch.Generator().manual_seed(2))
    for step, n in enumerate(lengths.tolist()):
        fit(net, opt, batch(64 * n) + position_table(64 * n))
        if step % 300 == 0:
            print(f"step {step}: {position_table.cache_info().currsize} tables")


# Twelfth set: memoization keyed by tensors, closures, serving caches, tasks taking turns.
class TokenEncoder(torch.nn.Module):
    """A frozen embedding and MLP: token ids in, one 1024-wide feature row per token."""

    def __init__(self):
        super().__init__()
        self.embed, self.body = torch.nn.Embedding(32000, 1024).cuda(), model()

    def forward(self, tokens):
        return self.body(self.embed(tokens))


def train_head_on_memoized_features(maxsize, steps):
    encoder, head = TokenEncoder().eval(), model()
    opt = torch.optim.SGD(head.parameters(), lr=1e-3)

    @functools.lru_cache(maxsize=maxsize)
    def features(tokens):
        with torch.no_grad():
            return encoder(tokens)  # LEAK: each batch's features stay in the cache

    for step in range(steps):
        tokens = torch.randint(32000, (2048,), device="cuda")
        fit(head, opt, features(tokens))
        if step % 500 == 0:
            print(f"step {step}: {features.cache_info().currsize} cached")


@case("leak", leak_in=train_head_on_memoized_features)
def features_memoized_by_tensor_with_lru_cache():
    """A frozen encoder's features memoized with an unbounded functools.lru_cache keyed by
    the token tensor: tensors hash by identity, so every batch is a new key and its
    features stay cached."""
    train_head_on_memoized_features(maxsize=None, steps=100000)


@case("no leak")
def features_memoized_in_a_bounded_lru_cache():
    """The same memoization with maxsize=64: 64 feature maps (512 MiB) fill the cache in
    the first 64 steps, then each new one evicts the oldest."""
    train_head_on_memoized_features(maxsize=64, steps=1500)


@case("no leak")
def metrics_deferred_in_late_bound_closures():
    """Accuracy deferred to the end of each epoch as lambdas over the step's output: a
    closure reads the loop's variable when called, not its value when made, so every
    lambda sees the last output and earlier outputs are freed (the metric is wrong; the
    memory is fine)."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for epoch in range(6):
        deferred = []
        for _ in range(250):
            out, _ = fit(net, opt, batch())
            deferred.append(lambda: (out.argmax(1) == 0).float().mean())
        print(f"epoch {epoch}: {sum(f() for f in deferred).item() / len(deferred):.3f}")


@case("leak")
def metrics_deferred_in_closures_bound_by_default():
    """The same deferred accuracy written `lambda out=out: ...` to fix the metric: each
    lambda now holds its step's output, and the list is never cleared."""
    net, deferred = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(100000):
        out, _ = fit(net, opt, batch())  # LEAK: each output held by its lambda below
        deferred.append(lambda out=out: (out.argmax(1) == 0).float().mean())
        if step % 250 == 249:
            print(f"step {step}: {sum(f() for f in deferred).item() / len(deferred):.3f}")


@case("leak")
def prefix_cache_of_every_prompt():
    """A serving loop caching each prompt's hidden states for follow-up requests, keyed
    by the prompt's id; every request is a new prompt and nothing is evicted."""
    encoder, decoder = model(), model()
    cache = {}
    with torch.no_grad():
        for request in range(100000):
            hidden = encoder(batch(256))  # LEAK: kept in the cache below, never evicted
            cache[f"prompt-{request}"] = hidden
            reply = decoder(hidden).argmax(1)
            if request % 500 == 0:
                print(f"request {request}: reply {reply[0].item()}, {len(cache)} cached")


@case("leak")
def multitask_keeps_outputs_of_one_task():
    """Two task heads trained in turns, step by step; the segmentation task's outputs
    are kept for a visualisation at the end: memory grows every other step."""
    nets = [model(), model()]
    opts = [torch.optim.SGD(n.parameters(), lr=1e-3) for n in nets]
    shown = []
    for step in range(100000):
        task = step % 2
        out, _ = fit(nets[task], opts[task], batch())  # LEAK: task 1's outputs kept below
        if task == 1:
            shown.append(out.detach())


@case("no leak")
def mixup_with_the_previous_batch():
    """Mixup against the batch before: one batch is carried from step to step and
    replaced, so what is kept stays the same size."""
    net, previous = model(), None
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(1500):
        x = batch()
        mixed = x if previous is None else 0.7 * x + 0.3 * previous
        fit(net, opt, mixed)
        previous = x
        if step % 300 == 0:
            print(f"step {step}")


@case("no leak")
def lstm_on_sequences_of_random_length():
    """A two-layer cuDNN LSTM on batches of 64 sequences of a random length (16-512):
    its activations and workspace change size every step, and nothing is kept."""
    torch.manual_seed(0)
    lstm, head = torch.nn.LSTM(256, 512, num_layers=2).cuda(), torch.nn.Linear(512, 8).cuda()
    opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)
    lengths = torch.randint(16, 513, (1500,), generator=torch.Generator().manual_seed(4))
    for step, n in enumerate(lengths.tolist()):
        out, _ = lstm(torch.randn(n, 64, 256, device="cuda"))
        loss = head(out[-1]).logsumexp(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 300 == 0:
            print(f"step {step}: length {n}, loss {loss.item():.4f}")


@case("no leak")
def soft_labels_stored_per_batch_index():
    """Self-training: each batch's soft labels stored on the device by its index in the
    epoch (200 batches, 2 MiB each) and replaced the next epoch; the store fills during
    the first epoch and then stays the same size."""
    net, store = model(), {}
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for epoch in range(8):
        for i in range(200):
            out, _ = fit(net, opt, batch(512))
            store[i] = out.detach().softmax(1)
        print(f"epoch {epoch}: {len(store)} stored")


# Blocks of changing sizes, a few kept among them: written to run out of memory from
# fragmentation under PyTorch's allocator, they did not (on an H100, under the 4 GiB cap,
# its cache reached 1.43-1.51x the peak allocated, and it gave memory back at the cap):
# no leak, with the size churn that could be mistaken for one.
@case("no leak")
def random_lengths_keep_recent_hidden_states():
    """A wide MLP on batches of 4 sequences of a random length (256-4096 tokens); the
    first sequence's hidden states of the last 16 steps are kept for a probe (a bounded
    deque). Each kept copy (2-32 MiB) is cut from a cached block of the step's
    activations, whose sizes follow the length."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(2048, 2048),
                                                    torch.nn.GELU()) for _ in range(6)]).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    lengths = torch.randint(256, 4097, (1500,), generator=torch.Generator().manual_seed(5))
    recent = collections.deque(maxlen=16)
    for step, n in enumerate(lengths.tolist()):
        h = net[:3](torch.randn(4, n, 2048, device="cuda"))
        recent.append(h[0].detach().clone())  # bounded: the last 16 steps
        loss = net[3:](h).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 500 == 0:
            print(f"step {step}: length {n}, loss {loss.item():.4f}")


@case("no leak")
def serving_requests_with_preallocated_kv_caches():
    """A serving loop with 12 requests in flight, each with its key/value cache
    allocated whole when it starts (its length known: 64-1024 positions of 64 x 1024
    floats, 16-256 MiB), written a position per decoding step and dropped when it ends:
    caches of every size come and go, about 1.6 GiB live."""
    net = trained(50)
    lengths = iter(torch.randint(64, 1025, (300,), generator=torch.Generator().manual_seed(6)).tolist())
    caches, written = [None] * 12, [0] * 12
    x, served = torch.randn(64, 1024, device="cuda"), 0
    with torch.no_grad():
        while True:
            for slot in range(12):
                if caches[slot] is None:
                    n = next(lengths, None)
                    if n is None:
                        continue
                    caches[slot], written[slot] = torch.empty(64, n, 1024, device="cuda"), 0
                cache = caches[slot]
                cache[:, written[slot]] = net(x)
                written[slot] += 1
                if written[slot] == cache.shape[1]:
                    caches[slot], served = None, served + 1
                    if served % 50 == 0:
                        print(f"{served} requests served")
            if all(c is None for c in caches):
                break



# A thirteenth set: reinforcement learning, meta-learning, saved-tensor hooks, a
# layer's statistics and recurrent state that carry autograd graphs.
def policy():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Tanh(),
                               torch.nn.Linear(1024, 1024)).cuda()


@case("leak")
def policy_distributions_kept_for_logging():
    """A policy-gradient update per step over 2048 parallel environments; each step's
    action distribution kept to plot its entropy at the end: a Categorical holds its
    normalised logits (8 MiB)."""
    net, dists = policy(), []
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    for step in range(100000):
        obs = torch.randn(2048, 256, device="cuda")
        dist = torch.distributions.Categorical(logits=net(obs))  # LEAK: kept below
        action = dist.sample()
        reward = (action % 7 == 0).float()
        loss = -(dist.log_prob(action) * (reward - reward.mean())).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        dists.append(dist)
        if step % 200 == 0:
            print(f"step {step}: reward {reward.mean().item():.3f}")


@case("no leak")
def reinforce_episodes_hold_graphs_until_the_update():
    """REINFORCE as in PyTorch's examples: each episode's log-probabilities (with their
    graphs) are kept until the episode's update and then cleared, so memory rises
    through an episode (64 actions) and falls at the update."""
    net, log_probs, rewards = policy(), [], []
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    for episode in range(300):
        for _ in range(64):
            dist = torch.distributions.Categorical(logits=net(torch.randn(512, 256, device="cuda")))
            action = dist.sample()
            log_probs.append(dist.log_prob(action))
            rewards.append((action % 7 == 0).float())
        returns = torch.stack(rewards).flip(0).cumsum(0).flip(0)
        loss = -(torch.stack(log_probs) * (returns - returns.mean())).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        del log_probs[:], rewards[:]
        if episode % 50 == 0:
            print(f"episode {episode}: return {returns[0].mean().item():.2f}")


@case("leak")
def saved_tensors_kept_by_a_pack_hook():
    """Saved-tensor hooks that store each saved activation in a dict by id and hand
    autograd the id, to share duplicates; unpack looks it up, and nothing ever removes
    an entry."""
    net, store = model(), {}
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def pack(t):
        store[id(t)] = t
        return id(t)

    for step in range(100000):
        with torch.autograd.graph.saved_tensors_hooks(pack, store.__getitem__):
            out = net(batch(512))  # LEAK: its saved activations stay in the store
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 200 == 0:
            print(f"step {step}: {len(store)} stored")


class NormWithRunningVariance(torch.nn.Module):
    """A linear layer normalised by its batch's statistics, with a running variance
    for inference updated outside torch.no_grad(): each update's graph holds the batch's
    activations (var saves its input) and the previous update's graph."""

    def __init__(self, width=1024):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)
        self.register_buffer("running_var", torch.ones(width))

    def forward(self, x):
        h = self.linear(x)  # LEAK: each step's h kept by the running variance's graph
        if self.training:
            self.running_var = 0.9 * self.running_var + 0.1 * h.var(0)
            return (h - h.mean(0)) / (h.var(0) + 1e-5).sqrt()
        return (h - h.mean(0)) / (self.running_var + 1e-5).sqrt()


@case("leak", leak_in=NormWithRunningVariance)
def running_variance_updated_with_grad():
    net = with_head(NormWithRunningVariance, 1024)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(100000):
        fit(net, opt, batch())
        if step % 200 == 0:
            print(f"step {step}")


def meta_train(keep_adapted, tasks):
    """Second-order MAML: five inner steps a task, with create_graph=True so the outer
    loss differentiates through them; returns the adapted weights if asked to keep
    them."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(1024, 1024, device="cuda") * 0.03)
              for _ in range(3)]
    opt, adapted = torch.optim.Adam(params, lr=1e-4), []

    def forward(ws, x):
        for w in ws[:-1]:
            x = torch.relu(x @ w)
        return x @ ws[-1]

    for task in range(tasks):
        x, fast = batch(512), list(params)
        for _ in range(5):
            grads = torch.autograd.grad(forward(fast, x).pow(2).mean(), fast, create_graph=True)
            fast = [w - 0.01 * g for w, g in zip(fast, grads)]  # LEAK: kept below
        outer = forward(fast, batch(512)).pow(2).mean()
        opt.zero_grad()
        outer.backward()
        opt.step()
        if keep_adapted:
            adapted.append(fast)
        if task % 100 == 0:
            print(f"task {task}: outer loss {outer.item():.4f}")
    return adapted


@case("no leak")
def maml_second_order_inner_loops():
    meta_train(keep_adapted=False, tasks=400)


@case("leak", leak_in=meta_train)
def maml_adapted_weights_kept_per_task():
    """Each task's adapted weights kept to evaluate them later (12 MiB a task)."""
    meta_train(keep_adapted=True, tasks=100000)


@case("leak")
def streaming_recurrent_state_carried_with_grad():
    """A GRU run over an endless stream, 64 streams at once, one frame at a time, its
    state carried from frame to frame; the model is in eval mode but the loop is not
    under torch.no_grad(), so the state's graph reaches back to the first frame and every
    frame's gates stay on the device."""
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(512, 1024).cuda().eval()
    hidden = torch.zeros(64, 1024, device="cuda")
    for frame in range(1000000):
        hidden = cell(torch.randn(64, 512, device="cuda"), hidden)  # LEAK: kept by the graph
        if frame % 500 == 0:
            print(f"frame {frame}: state norm {hidden.norm().item():.3f}")


@case("genuine peak")
def attention_scores_of_long_validation_sequences():
    """Self-attention written out (scores materialised) trained on sequences of 512 and
    validated under no_grad on whole documents of 8192 tokens: the validation's score
    matrix (16 heads x 8192^2 floats, 4 GiB) does not fit."""
    torch.manual_seed(0)
    qkv, out = torch.nn.Linear(1024, 3 * 1024).cuda(), torch.nn.Linear(1024, 1024).cuda()
    opt = torch.optim.Adam(list(qkv.parameters()) + list(out.parameters()), lr=1e-4)

    def attend(x):
        q, k, v = qkv(x).view(x.shape[0], x.shape[1], 3, 16, 64).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2) / 8).softmax(-1)
        return out((scores @ v).transpose(1, 2).reshape(x.shape))

    for epoch in range(3):
        for step in range(300):
            loss = attend(torch.randn(8, 512, 1024, device="cuda")).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            print(f"epoch {epoch}: validation {attend(torch.randn(1, 8192, 1024, device='cuda')).norm().item():.3f}")



# Serving loops written with asyncio: each request a coroutine, the event loop between
# the allocation and the code that keeps it.
def serve_requests(keep_every_reply, requests):
    import asyncio
    net, replies = trained(20), {}

    async def handle(request):
        await asyncio.sleep(0)
        with torch.no_grad():
            reply = net(batch(512))  # LEAK: every reply kept below by its request id
        if keep_every_reply:
            replies[request] = reply
        else:
            replies[request % 32] = reply  # the last 32 requests' replies, for retries
        return reply.norm().item()

    async def main():
        for wave in range(requests // 16):
            await asyncio.gather(*(handle(wave * 16 + i) for i in range(16)))
            if wave % 50 == 0:
                print(f"wave {wave}: {len(replies)} replies held")

    asyncio.run(main())


@case("leak", leak_in=serve_requests)
def async_server_keeps_every_reply():
    """An asyncio server answering requests in waves of 16 coroutines, each reply kept
    by its request id for a follow-up that never comes."""
    serve_requests(keep_every_reply=True, requests=1000000)


@case("no leak")
def async_server_keeps_the_last_replies():
    """The same server keeping the replies of the last 32 requests, slot by request id
    modulo 32."""
    serve_requests(keep_every_reply=False, requests=16000)


@case("leak")
def loss_scaler_skips_every_step_and_outputs_are_kept():
    """float16 autocast under a GradScaler whose scale never comes down far enough (a
    loss that overflows float16 at any scale, as a bad normalisation gives): every
    optimizer step is skipped, so no step hook fires; each step's output is kept."""
    net, outputs = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 16)
    for step in range(100000):
        with torch.autocast("cuda", dtype=torch.float16):
            out = net(batch())  # LEAK: kept below
            loss = out.float().pow(2).sum() * 1e38
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        outputs.append(out)
        if step % 200 == 0:
            print(f"step {step}: scale {scaler.get_scale():.3g}")



# Iterations made of many forward calls whose graphs wait for one backward, too large for
# the device: the run dies inside its first iteration, before any update.
@case("genuine peak")
def reinforce_episode_too_long_for_the_device():
    """REINFORCE over 2048 parallel environments with episodes of 1000 actions: each
    action's log-probabilities keep their graph (about 9 MiB) until the episode's update,
    and the first episode does not fit under the cap."""
    net, log_probs = policy(), []
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    for episode in range(10):
        for _ in range(1000):
            dist = torch.distributions.Categorical(logits=net(torch.randn(2048, 256, device="cuda")))
            log_probs.append(dist.log_prob(dist.sample()))
        loss = -torch.stack(log_probs).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        del log_probs[:]


@case("genuine peak")
def losses_summed_over_too_many_micro_batches():
    """Gradient accumulation written as one sum of the micro-batches' losses and one
    backward: the graphs of all 256 micro-batches are held at once, and they do not fit."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(10):
        total = sum(net(batch(1024)).pow(2).mean() for _ in range(256))
        opt.zero_grad()
        total.backward()
        opt.step()


# A fourteenth set, run before any change for them: metric objects, modules made in
# forward, a batch size that doubles, a memo that never hits, an unbounded prefetch queue.
class DeviceAccuracy:
    """A metric as scripts write one: the step's probabilities kept on the device until
    compute(), which reset() is meant to follow."""

    def __init__(self):
        self.probs, self.targets = [], []

    def update(self, out, target):
        self.probs.append(out.detach().softmax(1))  # LEAK: every step's, until reset()
        self.targets.append(target)

    def compute(self):
        hits = sum(int((p.argmax(1) == t).sum()) for p, t in zip(self.probs, self.targets))
        return hits / sum(len(t) for t in self.targets)

    def reset(self):
        self.probs, self.targets = [], []


def train_with_metric(reset, epochs=12, steps=100):
    net, metric = model(), DeviceAccuracy()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for epoch in range(epochs):
        for _ in range(steps):
            x = batch()
            out, _ = fit(net, opt, x)
            metric.update(out, x.argmax(1))
        print(f"epoch {epoch}: accuracy {metric.compute():.4f}")
        if reset:
            metric.reset()


@case("leak", leak_in=DeviceAccuracy)
def metric_state_never_reset():
    """The metric's compute() at each epoch's end, its reset() forgotten: it keeps every
    step's probabilities (8 MiB a step)."""
    train_with_metric(reset=False)


@case("no leak")
def metric_state_reset_each_epoch():
    """The same metric reset after each epoch's compute(): 800 MiB at an epoch's end, all
    given back, every epoch."""
    train_with_metric(reset=True)


@case("no leak")
def outputs_kept_until_the_accumulated_step():
    """Sixteen micro-batches an optimizer step; their outputs are kept for the window's log
    line and the list is replaced when the next window starts."""
    net = model()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    for step in range(300):
        window = []
        for _ in range(16):
            out = net(batch(1024))
            (out.pow(2).mean() / 16).backward()
            window.append(out.detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0:
            print(f"step {step}: output norm {torch.stack([o.norm() for o in window]).mean():.3f}")


class GrowingHeads(torch.nn.Module):
    """A head made in forward for each call, kept in a ModuleList "to inspect later"."""

    def __init__(self):
        super().__init__()
        self.body = model()
        self.heads = torch.nn.ModuleList()

    def forward(self, x):
        self.heads.append(torch.nn.Linear(1024, 1024).cuda())  # LEAK: a head (and its grad) a call
        return self.heads[-1](self.body(x))


@case("leak", leak_in=GrowingHeads)
def heads_created_in_forward_kept_in_a_module_list():
    """Each call's new head stays in the module, and its gradient with it (8 MiB a step);
    the optimizer, built before, never sees them."""
    net = GrowingHeads()
    opt = torch.optim.SGD(net.body.parameters(), lr=1e-3)
    for _ in range(100000):
        fit(net, opt, batch(1024))


@case("genuine peak")
def batch_size_doubled_each_epoch():
    """A batch-size schedule that doubles the batch every epoch of 50 steps: nothing is
    kept between steps, and the step of some epoch no longer fits."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for epoch in range(20):
        for _ in range(50):
            _, loss = fit(net, opt, batch(256 << epoch))
        print(f"epoch {epoch}: batch {256 << epoch}, loss {loss.item():.4f}")


@case("leak")
def masks_cached_by_length_tuple():
    """Padding masks memoized by the batch's tuple of lengths: lengths are random, so the
    memo never hits and keeps one 2 MiB mask a step."""
    net, masks = model(), {}
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    positions = torch.arange(2048, device="cuda")
    for _ in range(100000):
        lengths = torch.randint(1, 2048, (256,), device="cuda")
        key = tuple(lengths.tolist())
        if key not in masks:
            masks[key] = (positions[None, :] < lengths[:, None]).float()  # LEAK: never hit
        out = net(batch(256))
        loss = (out * masks[key][:, :1024]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def train_from_an_unbounded_queue(net):
    """A loader thread copies batches to the device into an unbounded queue.Queue a little
    faster than the training loop takes them (a batch every 3 ms against every 4 ms and
    more); errors go through the queue to the loop."""
    import queue
    import threading
    import time
    ready, stop = queue.Queue(), threading.Event()
    host = torch.randn(2048, 1024).pin_memory()

    def load():
        try:
            while not stop.is_set():
                ready.put(host.cuda(non_blocking=True))  # LEAK: queued faster than taken
                time.sleep(0.003)
        except Exception as error:  # the loop re-raises it
            ready.put(error)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    try:
        for step in range(100000):
            x = ready.get()
            if isinstance(x, Exception):
                raise x
            fit(net, opt, x)
            time.sleep(0.004)  # logging, checkpoints: the loop is the slower side
    finally:
        stop.set()


@case("leak", leak_in=train_from_an_unbounded_queue)
def prefetch_queue_without_a_bound():
    """The loader of train_from_an_unbounded_queue, feeding a model."""
    train_from_an_unbounded_queue(model())


@case("leak", leak_in=train_from_an_unbounded_queue)
def prefetch_queue_while_the_first_step_compiles():
    """The same loader, feeding a torch.compile'd model: the first step compiles for
    seconds while the queue fills, so memory runs out before any step has finished."""
    train_from_an_unbounded_queue(torch.compile(model()))



def prefetched(fields, depth, rows, ready_before=0.0):
    """Batches of `fields` alike device tensors (a dict of `rows` x 1024 each), copied by a
    loader thread into a queue bounded at `depth`, as prefetch_generator's
    BackgroundGenerator does; errors go through the queue. The loop starts
    `ready_before` seconds later (logging and checkpoint setup), the queue full by then."""
    import queue
    import threading
    import time
    ready, stop = queue.Queue(maxsize=depth), threading.Event()
    host = torch.randn(rows, 1024).pin_memory()

    def load():
        try:
            while not stop.is_set():
                item = {f"view{i}": host.cuda(non_blocking=True) for i in range(fields)}
                while not stop.is_set():
                    try:
                        ready.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        pass
        except Exception as error:  # the loop re-raises it
            ready.put(error)

    threading.Thread(target=load, daemon=True).start()
    time.sleep(ready_before)
    try:
        while True:
            item = ready.get()
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        stop.set()


@case("no leak")
def bounded_prefetcher_of_many_view_batches():
    """Multi-view batches (24 views of one shape) prefetched to the device two batches
    ahead by a loader thread: 72-96 alike blocks live at any time, none of them kept."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step, views in zip(range(3000), prefetched(fields=24, depth=2, rows=256)):
        fit(net, opt, torch.cat(list(views.values())))


@case("genuine peak")
def bounded_prefetcher_beside_a_first_step_too_large():
    """The same loader, batches of 24 views of 5120 rows (480 MiB a batch, four of them
    held: two queued, one waiting to be, one in use) for a step over all views at once
    (activations of 480 MiB a layer): the step alone would fit, the step with the queue
    does not. The queue is bounded, so nothing grows: an iteration too large for the
    device as loaded, not a leak."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step, views in zip(range(100), prefetched(fields=24, depth=2, rows=5120,
                                                  ready_before=2.0)):
        fit(net, opt, torch.cat(list(views.values())))  # LEAK: the first step (a peak)


@case("leak")
def debug_records_buffered_with_output_values():
    """Debug records buffered by a logging.handlers.MemoryHandler, to be written only if
    an error is logged; each record keeps its arguments, here the first values of the
    step's output: a view that keeps the whole output (8 MiB a step)."""
    import logging
    import logging.handlers
    log = logging.getLogger("train")
    log.setLevel(logging.DEBUG)
    log.addHandler(logging.handlers.MemoryHandler(
        capacity=1_000_000, flushLevel=logging.ERROR, target=logging.FileHandler(os.devnull)))
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(100000):
        out, loss = fit(net, opt, batch())  # LEAK: each record keeps a view of the output
        log.debug("step %d: loss %s, first outputs %s", step, loss.detach(), out[0, :4])



@case("no leak")
def long_batches_that_run_out_are_skipped():
    """As fairseq and many trainers do: a step that runs out of memory on a rare, very
    long batch is caught, its gradients dropped and the cache emptied, and training goes
    on. Nothing is kept: the run ends normally."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    lengths = torch.Generator().manual_seed(0)
    skipped = 0
    for step in range(1500):
        rows = 2048 * (200 if torch.rand((), generator=lengths) < 0.02 else 1)
        try:
            fit(net, opt, batch(rows))
        except torch.OutOfMemoryError:
            skipped += 1
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
    print(f"skipped {skipped} batches that ran out of memory")


@case("out of memory outside the allocator", "leak")
def extension_takes_device_memory_each_step():
    """A custom extension's scratch buffer taken from the driver (cuMemAlloc, outside
    PyTorch's allocator) at every call and never given back: 256 MiB a step until the
    device is full, a leak outside the allocator. Under PyTorch's allocator, which needs
    nothing new in steady steps, the extension's own call fails (an out-of-memory outside
    the allocator, whose verdict names the leak); gpumem's allocator, which keeps less
    cached, runs out first, the device full of the extension's memory."""
    import ctypes
    driver = ctypes.CDLL("libcuda.so.1")
    net, scratch = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(100000):
        ptr = ctypes.c_uint64()
        status = driver.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(256 * MiB))  # LEAK
        if status != 0:
            raise RuntimeError(f"extension: cuMemAlloc failed with CUDA error {status}")
        scratch.append(ptr.value)
        fit(net, opt, batch())


HOLDER = """
import sys, time, torch
held = []
for size in (1 << 30, 64 << 20, 2 << 20):
    while True:
        try:
            held.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            break
print(f"holder: {sum(h.numel() for h in held) / 2**30:.2f} GiB", file=sys.stderr, flush=True)
time.sleep(float(sys.argv[1]))
"""


@case("memory held outside the allocator")
def another_process_fills_the_gpu_before_a_long_batch():
    """A shared GPU: another job starts at step 200 and takes all the memory left; this
    run needs no new memory until a long batch at step 400, which runs out. Its own
    memory never grew: the device was full of the other process's."""
    import subprocess
    import time
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    holder = None
    try:
        for step in range(600):
            if step == 200:
                holder = subprocess.Popen([sys.executable, "-c", HOLDER, "120"])
                time.sleep(10)  # until it holds the rest
            fit(net, opt, batch(2048 * (4 if step == 400 else 1)))
    finally:
        if holder:
            holder.kill()


@case("leak")
def extension_keeps_device_memory_in_a_run_that_ends():
    """A custom extension's cuMemAlloc of 64 MiB at every step, never freed, in a run of
    300 steps that ends before the device fills (18.75 GiB kept): a leak outside the
    allocator at the line that calls it, with the step the device would run out in."""
    import ctypes
    driver = ctypes.CDLL("libcuda.so.1")
    net, kept = model(), []
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(300):
        ptr = ctypes.c_uint64()
        status = driver.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(64 * MiB))  # LEAK
        if status != 0:
            raise RuntimeError(f"extension: cuMemAlloc failed with CUDA error {status}")
        kept.append(ptr.value)
        fit(net, opt, batch())


@case("memory held outside the allocator")
def extension_workspace_fills_the_device_before_a_long_batch():
    """A custom extension takes one workspace from the driver at step 200 (cuMemAlloc,
    outside PyTorch's allocator), as much as the device has left but 256 MiB, and keeps it
    for the rest of the run, as a library that sizes its workspace to the free memory does.
    The run needs no new memory until a long batch at step 400, which runs out: this
    process's own library held the device, and it did not grow from step to step."""
    import ctypes
    driver = ctypes.CDLL("libcuda.so.1")
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    workspace = ctypes.c_uint64()
    for step in range(600):
        if step == 200:
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            driver.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
            size = ctypes.c_size_t(free.value - 256 * MiB)
            status = driver.cuMemAlloc_v2(ctypes.byref(workspace), size)  # the workspace
            if status != 0:
                raise RuntimeError(f"extension: cuMemAlloc failed with CUDA error {status}")
        fit(net, opt, batch(2048 * (16 if step == 400 else 1)))


@case("leak")
def raw_blocks_from_the_caching_allocator_kept():
    """Scratch buffers taken with torch.cuda.caching_allocator_alloc (as a library that
    borrows PyTorch's allocator does) and never handed back with caching_allocator_delete:
    32 MiB kept every step."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    scratch = []
    for _ in range(100000):
        scratch.append(torch.cuda.caching_allocator_alloc(32 * MiB))  # LEAK
        fit(net, opt, batch())


@case("no leak")
def module_keeps_its_last_input_for_debugging():
    """A module that keeps its latest input and output for debugging (self.last_input,
    self.last_output): each step replaces the ones before, a standing cost of one batch,
    not a leak."""
    class Recording(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = linear_layers(1024, 4)

        def forward(self, x):
            self.last_input = x
            self.last_output = self.body(x)
            return self.last_output

    torch.manual_seed(0)
    net = Recording().cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(600):
        fit(net, opt, batch())


if __name__ == "__main__":
    CASES.main(before_run=cap_device)
