"""Held-out training scripts for the diagnosis matrix, written apart from the tool, in the
styles found on forums and GitHub: each is an ordinary PyTorch script with no gpumem call,
run under a cap (GPUMEM_CASE_CAP_GIB of the device, default 4) so that an OOM comes in
seconds. In a leak, the line marked `# LEAK` makes the memory that is kept (the comment
says what keeps it); in a genuine peak it is the line that runs the pass too large to fit.

usage: heldout_cases.py CASE | list
"""
import collections
import copy
import dataclasses
import heapq
import logging
import logging.handlers
import math
import os
import queue
import random
import tempfile
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from case_registry import Cases

MiB = 1 << 20
CASES = Cases()
case = CASES.case  # case(verdict)


def cap_device():
    gib = float(os.environ.get("GPUMEM_CASE_CAP_GIB", "4"))
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, gib * (1 << 30) / total))


# Shared pieces, as a script would have them at its top.

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def synthetic_images(n, size, classes, seed=0):
    """A TensorDataset of uint8 images and labels, standing in for a folder of images."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    return TensorDataset(images, labels)


def normalize(images):
    """uint8 NCHW on the host -> normalized float on the device."""
    x = images.cuda(non_blocking=True).float().div_(255.0)
    mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def accuracy(logits, targets):
    return (logits.argmax(dim=1) == targets).float().mean().item()


# ---------------------------------------------------------------------------------------
# Leaks
# ---------------------------------------------------------------------------------------

class DecorrelationMonitorTrainer:
    """Trains an MLP classifier and keeps a running covariance of its penultimate features,
    to watch how decorrelated they become."""

    def __init__(self, in_features=512, width=1024, classes=100, momentum=0.99):
        torch.manual_seed(0)
        self.encoder = nn.Sequential(
            nn.Linear(in_features, width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU()).cuda()
        self.head = nn.Linear(width, classes).cuda()
        params = list(self.encoder.parameters()) + list(self.head.parameters())
        self.optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True)
        self.momentum = momentum
        self.feature_cov = torch.zeros(width, width, device="cuda")

    def update_feature_stats(self, feats):
        # 4096 x 1024 float32 = 16 MiB a step, saved by the matmul below
        centered = feats - feats.mean(dim=0)  # LEAK: saved by the mm node; each step's covariance is built on the last one's graph (no torch.no_grad, no detach)
        cov = centered.T @ centered / feats.shape[0]
        self.feature_cov = self.momentum * self.feature_cov + (1 - self.momentum) * cov

    def off_diagonal_energy(self):
        cov = self.feature_cov
        return (cov.pow(2).sum() - cov.diagonal().pow(2).sum()).item()

    def train_step(self, x, y):
        feats = self.encoder(x)
        loss = F.cross_entropy(self.head(feats), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.update_feature_stats(feats)
        return loss.item()


@case("leak", leak_in=DecorrelationMonitorTrainer)
def running_feature_covariance_without_no_grad():
    """A running covariance of the features, updated outside torch.no_grad: each update's
    graph hangs off the previous one, so every step's centered features (16 MiB, saved by
    the matmul, a branch the loss's backward never frees) stay alive for good."""
    trainer = DecorrelationMonitorTrainer()
    teacher = torch.randn(512, 100, device="cuda")
    for step in range(100000):
        x = torch.randn(4096, 512, device="cuda")
        y = (x @ teacher).argmax(dim=1)
        loss = trainer.train_step(x, y)
        if step % 100 == 0:
            print(f"step {step} loss {loss:.3f} "
                  f"off-diagonal {trainer.off_diagonal_energy():.2f}")


class WordLSTM(nn.Module):
    """Embedding + 2-layer LSTM word language model that keeps its hidden states for a
    later look at the state dynamics."""

    def __init__(self, vocab=8192, emb=256, hidden=1024, layers=2, dropout=0.2):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=layers, dropout=dropout, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden, vocab)
        self.hidden_trace = []

    def forward(self, tokens):
        output, _ = self.lstm(self.drop(self.embed(tokens)))  # LEAK: 64 x 128 x 1024 floats (32 MiB) a call, kept by self.hidden_trace
        self.hidden_trace.append(output)
        return self.decoder(self.drop(output))


@case("leak", leak_in=WordLSTM)
def lstm_language_model_records_hidden_states():
    """The model appends each forward's LSTM output to `self.hidden_trace` and nothing ever
    empties it: 32 MiB more per step."""
    torch.manual_seed(0)
    batch_size, bptt = 64, 128
    corpus = torch.randint(0, 8192, (2_000_000,))
    columns = corpus.numel() // batch_size
    data = corpus[: columns * batch_size].view(batch_size, columns).cuda()
    model = WordLSTM().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.95)
    for epoch in range(100):
        model.train()
        for batch, i in enumerate(range(0, columns - 1 - bptt, bptt)):
            inputs, targets = data[:, i:i + bptt], data[:, i + 1:i + 1 + bptt]
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            optimizer.step()
            if batch % 50 == 0:
                print(f"epoch {epoch} batch {batch} ppl {math.exp(loss.item()):.1f}")
        scheduler.step()


class DriftProbe(nn.Module):
    """Identity layer; in training it stores the batch's features as a (half precision)
    buffer so that checkpoints carry reference activations to compare deployment against."""

    def __init__(self):
        super().__init__()
        self.seen = 0

    def forward(self, x):
        if self.training:
            self.register_buffer(f"ref_{self.seen}", x.detach().half())  # LEAK: a new buffer name every batch: 128 x 64 x 32 x 32 halves = 16 MiB
            self.seen += 1
        return x


@case("leak", leak_in=DriftProbe)
def buffer_registered_under_new_name_each_batch():
    """A CNN with a probe that calls register_buffer under a new name on every training
    batch; the module owns all of them, 16 MiB more each step."""
    torch.manual_seed(0)
    probe = DriftProbe()
    model = nn.Sequential(
        conv_bn(3, 64), conv_bn(64, 64), probe, nn.MaxPool2d(2),
        conv_bn(64, 128), nn.MaxPool2d(2), conv_bn(128, 256),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10)).cuda()
    loader = DataLoader(synthetic_images(20000, 32, 10), batch_size=128, shuffle=True,
                        num_workers=0, drop_last=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=200)
    for epoch in range(200):
        model.train()
        for images, labels in loader:
            x, y = normalize(images), labels.cuda(non_blocking=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y, label_smoothing=0.1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        scheduler.step()
        print(f"epoch {epoch} loss {loss.item():.3f} buffers {len(list(model.buffers()))}")


class BinarizeSTE(torch.autograd.Function):
    """sign(x) forward, straight-through estimator (clipped to |x| <= 1) backward."""

    contexts = []  # read by the training loop to report the fraction of clipped inputs

    @staticmethod
    def forward(ctx, x):
        ctx.inside = x.abs() <= 1  # LEAK: the mask (8 MiB per activation call, 4 MiB per weight) lives on with each ctx in the class-level list
        BinarizeSTE.contexts.append(ctx)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.inside


class BinaryMLP(nn.Module):
    def __init__(self, in_features=784, width=2048, classes=10, depth=3):
        super().__init__()
        self.inp = nn.Linear(in_features, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(depth))
        self.norms = nn.ModuleList(nn.BatchNorm1d(width) for _ in range(depth + 1))
        self.out = nn.Linear(width, classes)

    def forward(self, x):
        h = self.norms[0](self.inp(x))
        for layer, norm in zip(self.hidden, self.norms[1:]):
            h = norm(F.linear(BinarizeSTE.apply(h), BinarizeSTE.apply(layer.weight)))
        return self.out(BinarizeSTE.apply(h))


def train_binary_mlp(steps, batch_size=4096):
    torch.manual_seed(0)
    model = BinaryMLP().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    teacher = torch.randn(784, 10, device="cuda")
    for step in range(steps):
        x = torch.rand(batch_size, 784, device="cuda")
        y = ((x - 0.5) @ teacher).argmax(dim=1)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            clipped = 1.0 - BinarizeSTE.contexts[-1].inside.float().mean().item()
            print(f"step {step} loss {loss.item():.3f} clipped {clipped:.2%}")


@case("leak", leak_in=BinarizeSTE)
def autograd_function_keeps_contexts_in_class_list():
    """A binarized MLP whose custom autograd.Function appends every ctx to a class-level
    list: each ctx keeps its clip mask, 4 activation masks (8 MiB) + 3 weight masks
    (4 MiB) = 44 MiB per step."""
    train_binary_mlp(100000)


def debug_logger(path):
    """INFO to the console; DEBUG records buffered in memory and written to `path` only
    when an ERROR is logged, so that a crash comes with the recent trace."""
    log = logging.getLogger("trainer")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    console = logging.StreamHandler()
    console.setLevel(logging.INFO)
    console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    trace = logging.handlers.MemoryHandler(capacity=100_000, flushLevel=logging.ERROR,
                                           target=logging.FileHandler(path),
                                           flushOnClose=False)
    log.addHandler(console)
    log.addHandler(trace)
    return log


@case("leak")
def memory_handler_buffers_tensor_log_records():
    """A MemoryHandler with a capacity of 100000 buffers every DEBUG record, and the records
    keep their args: the softmax of every batch (4096 x 1000 floats, 16 MiB) stays alive
    until a flush that never comes."""
    log = debug_logger(os.path.join(tempfile.mkdtemp(), "debug.log"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(),
                          nn.Linear(2048, 1000)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    teacher = torch.randn(512, 1000, device="cuda")
    for step in range(100000):
        x = torch.randn(4096, 512, device="cuda")
        y = (x @ teacher).argmax(dim=1)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        log.debug("step %d probs %s", step, logits.softmax(dim=-1))  # LEAK: 16 MiB a step, kept by the LogRecord in the MemoryHandler's buffer
        if step % 200 == 0:
            log.info("step %d loss %.4f", step, loss.item())


class InteractionStream(IterableDataset):
    """An endless stream of (item ids, item features) batches, as a log reader yields
    them: every batch brings items never seen before."""

    def __init__(self, batch_size=2048, features=256):
        self.batch_size, self.features = batch_size, features

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        next_id = 0
        while True:
            ids = torch.arange(next_id, next_id + self.batch_size)
            next_id += self.batch_size
            yield ids, torch.randn(self.batch_size, self.features, generator=g)


class RetrievalTrainer:
    """Self-supervised item encoder (two noisy views, in-batch negatives) that also builds
    an id -> embedding index of the hardest items for a nearest-neighbour demo."""

    def __init__(self, features=256, dim=2048, temperature=0.1):
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(features, 1024), nn.GELU(),
                                     nn.Linear(1024, dim)).cuda()
        self.optimizer = torch.optim.AdamW(self.encoder.parameters(), lr=1e-3)
        self.temperature = temperature
        self.index = {}

    def step(self, ids, feats):
        feats = feats.cuda(non_blocking=True)
        z1 = F.normalize(self.encoder(feats + 0.1 * torch.randn_like(feats)), dim=-1)  # LEAK: the whole 2048 x 2048 batch (16 MiB) is kept by the 8 rows stored in self.index
        z2 = F.normalize(self.encoder(feats + 0.1 * torch.randn_like(feats)), dim=-1)
        logits = z1 @ z2.T / self.temperature
        loss = F.cross_entropy(logits, torch.arange(len(ids), device=logits.device))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        with torch.no_grad():
            hardest = logits.diagonal().topk(8, largest=False).indices
        for j in hardest.tolist():
            self.index[int(ids[j])] = z1[j].detach()  # a view: its storage is all of z1
        return loss.item()


@case("leak", leak_in=RetrievalTrainer)
def embedding_index_rows_keep_whole_batches():
    """A dict keyed by item id, fed from an endless stream of new items, stores 8 rows per
    batch; each row is a view of the batch's embeddings, so the whole 16 MiB batch stays
    alive, every step."""
    trainer = RetrievalTrainer()
    loader = DataLoader(InteractionStream(), batch_size=None, num_workers=0)
    for step, (ids, feats) in enumerate(loader):
        loss = trainer.step(ids, feats)
        if step % 50 == 0:
            print(f"step {step} loss {loss:.3f} index size {len(trainer.index)}")
        if step == 100000:
            break


@torch.no_grad()
def momentum_update(online, target, m=0.99):
    for p, q in zip(online.parameters(), target.parameters()):
        q.mul_(m).add_(p, alpha=1 - m)


@case("leak")
def contrastive_bank_concatenated_not_truncated():
    """MoCo-style training whose negatives come from a key bank grown with torch.cat; the
    loss only reads the last 16384 keys, but nothing drops the older ones: 2048 keys of
    1024 floats (8 MiB) more each step."""
    torch.manual_seed(0)

    def encoder():
        return nn.Sequential(nn.Linear(512, 2048), nn.BatchNorm1d(2048), nn.ReLU(),
                             nn.Linear(2048, 1024)).cuda()

    query_encoder = encoder()
    key_encoder = copy.deepcopy(query_encoder).requires_grad_(False)
    optimizer = torch.optim.SGD(query_encoder.parameters(), lr=0.03, momentum=0.9,
                                weight_decay=1e-4)
    bank = F.normalize(torch.randn(16384, 1024, device="cuda"), dim=1)
    for step in range(100000):
        x = torch.randn(2048, 512, device="cuda")
        q = F.normalize(query_encoder(x + 0.1 * torch.randn_like(x)), dim=1)
        with torch.no_grad():
            momentum_update(query_encoder, key_encoder)
            k = F.normalize(key_encoder(x + 0.1 * torch.randn_like(x)), dim=1)
        positives = (q * k).sum(dim=1, keepdim=True)
        negatives = q @ bank[-16384:].T
        logits = torch.cat([positives, negatives], dim=1) / 0.07
        labels = torch.zeros(len(x), dtype=torch.long, device="cuda")
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        bank = torch.cat([bank, k])  # LEAK: the bank grows by 8 MiB a step; meant as a 16384-key queue
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} bank {tuple(bank.shape)}")


@dataclasses.dataclass
class StepRecord:
    epoch: int
    step: int
    loss: float
    confusion: torch.Tensor  # this batch's classes x classes counts, summed for the report


@case("leak")
def confusion_matrix_per_step_in_dataclass_history():
    """Each step's result is a dataclass appended to a history, and it holds the batch's
    1024 x 1024 int64 confusion matrix on the device (8 MiB a step), to be summed per
    epoch at the end of training."""
    torch.manual_seed(0)
    classes = 1024
    model = nn.Sequential(conv_bn(3, 32), conv_bn(32, 64, 2), conv_bn(64, 128, 2),
                          conv_bn(128, 256, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(256, classes)).cuda()
    loader = DataLoader(synthetic_images(25600, 32, classes), batch_size=512, shuffle=True,
                        num_workers=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    history = []
    for epoch in range(1000):
        for step, (images, labels) in enumerate(loader):
            x, y = normalize(images), labels.cuda(non_blocking=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            confusion = torch.bincount(y * classes + logits.argmax(dim=1), minlength=classes * classes).view(classes, classes)  # LEAK: 8 MiB, kept by the StepRecord in history
            history.append(StepRecord(epoch, step, loss.item(), confusion))
        epoch_losses = [r.loss for r in history if r.epoch == epoch]
        print(f"epoch {epoch} mean loss {sum(epoch_losses) / len(epoch_losses):.3f}")


class InputGradientCNN(nn.Module):
    def __init__(self, classes=100):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, stride=2, padding=1)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


@case("leak")
def input_gradient_saliency_kept_with_graph():
    """Double backprop (an input-gradient penalty via autograd.grad(create_graph=True));
    the saliency map kept for plotting is computed from the gradient without detach, so
    its graph saves the gradient and its abs: 12 + 12 + 4 MiB a step."""
    torch.manual_seed(0)
    model = InputGradientCNN().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(synthetic_images(5120, 64, 100), batch_size=256, shuffle=True,
                        num_workers=0, drop_last=True)
    penalty_weight = 0.1
    saliency_maps = []
    for epoch in range(1000):
        for images, labels in loader:
            x = normalize(images).requires_grad_(True)
            y = labels.cuda(non_blocking=True)
            ce = F.cross_entropy(model(x), y)
            (grad_x,) = torch.autograd.grad(ce, x, create_graph=True)
            penalty = grad_x.pow(2).sum(dim=(1, 2, 3)).mean()
            loss = ce + penalty_weight * penalty
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            saliency_maps.append(grad_x.abs().amax(dim=1))  # LEAK: the map and the graph behind it (|g| and g saved) are kept
        print(f"epoch {epoch} ce {ce.item():.3f} penalty {penalty.item():.4f}")


class TinyTransformerClassifier(nn.Module):
    def __init__(self, vocab=8192, d_model=256, nhead=4, layers=4, classes=20, max_len=512):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, max_len, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=4 * d_model,
                                           dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, tokens):
        h = self.embed(tokens) + self.pos[:, :tokens.size(1)]
        return self.head(self.encoder(h).mean(dim=1))


class LoggedTrainer:
    """AMP trainer that records the optimizer's hyper-parameters after every step for a
    learning-rate/momentum curve."""

    def __init__(self, model, total_steps):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
            self.optimizer, max_lr=3e-4, total_steps=total_steps)
        self.scaler = torch.amp.GradScaler("cuda")
        self.lr_curve = []

    def step(self, tokens, labels):
        self.model.train()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(self.model(tokens), labels)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.lr_curve.append(copy.deepcopy(self.optimizer.param_groups))  # LEAK: 'params' is in each group: a full copy of the weights (~21 MiB) a step
        return loss.item()


@case("leak", leak_in=LoggedTrainer)
def deepcopy_of_param_groups_for_lr_curve():
    """The learning-rate curve is kept as deepcopy(optimizer.param_groups), which copies
    every parameter ('params' is a key of each group): about 5.4M floats, 21 MiB a step."""
    torch.manual_seed(0)
    model = TinyTransformerClassifier().cuda()
    trainer = LoggedTrainer(model, total_steps=100000)
    for step in range(100000):
        tokens = torch.randint(0, 8192, (64, 256), device="cuda")
        labels = tokens[:, 0] % 20
        loss = trainer.step(tokens, labels)
        if step % 50 == 0:
            print(f"step {step} loss {loss:.3f} lr {trainer.lr_curve[-1][0]['lr']:.2e}")


class TextDataset(Dataset):
    def __init__(self, n=20000, vocab=32000, min_len=32, max_len=256, classes=5):
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(min_len, max_len + 1, (n,), generator=g).tolist()
        self.texts = [torch.randint(1, vocab, (length,), generator=g) for length in lengths]
        self.labels = torch.randint(0, classes, (n,), generator=g)

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return i, self.texts[i], self.labels[i]


def collate_texts(batch):
    ids, texts, labels = zip(*batch)
    return list(ids), list(texts), torch.stack(labels)


class FrozenEmbeddingEncoder:
    """Pads a batch and looks it up in a frozen pretrained embedding table, caching the
    result by the batch's sample ids so that a repeated batch costs nothing."""

    def __init__(self, vocab=32000, dim=512):
        self.table = nn.Embedding(vocab, dim, padding_idx=0).cuda().requires_grad_(False)
        self.cache = {}

    def encode(self, ids, texts):
        key = ",".join(map(str, ids))
        if key not in self.cache:
            padded = nn.utils.rnn.pad_sequence(texts, batch_first=True).cuda()
            with torch.no_grad():
                self.cache[key] = (self.table(padded), padded != 0)  # LEAK: 64 x ~256 x 512 floats (32 MiB) under a key a shuffled loader never repeats
        return self.cache[key]


class GRUClassifier(nn.Module):
    def __init__(self, dim=512, hidden=512, classes=5):
        super().__init__()
        self.gru = nn.GRU(dim, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, embedded, mask):
        out, _ = self.gru(embedded)
        mask = mask.unsqueeze(-1).to(out.dtype)
        pooled = (out * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)
        return self.head(pooled)


@case("leak", leak_in=FrozenEmbeddingEncoder)
def padded_batch_cache_keyed_by_shuffled_ids():
    """Embedded, padded batches are cached under a string of their sample ids; with a
    shuffling DataLoader the same string never comes twice, so the cache only grows, by
    about 32 MiB a step."""
    torch.manual_seed(0)
    loader = DataLoader(TextDataset(), batch_size=64, shuffle=True, num_workers=0,
                        collate_fn=collate_texts)
    encoder = FrozenEmbeddingEncoder()
    model = GRUClassifier().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(100):
        for step, (ids, texts, labels) in enumerate(loader):
            embedded, mask = encoder.encode(ids, texts)
            loss = F.cross_entropy(model(embedded, mask), labels.cuda())
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f} "
                      f"cached {len(encoder.cache)}")


def gpu_augment(images, labels, classes=100, alpha=1.0, _previous=[]):
    """Normalizes a uint8 batch on the GPU and CutMixes it with the previous batch (which
    the default argument remembers between calls)."""
    x = images.cuda(non_blocking=True).float().div_(255.0)  # LEAK: 256 x 3 x 64 x 64 floats (12 MiB) a batch, all kept by the default list `_previous`
    y = F.one_hot(labels.cuda(non_blocking=True), classes).float()
    mixed_x, mixed_y = x, y
    if _previous:
        prev_x, prev_y = _previous[-1]
        lam = random.betavariate(alpha, alpha)
        h, w = x.shape[2:]
        ch, cw = int(h * math.sqrt(1 - lam)), int(w * math.sqrt(1 - lam))
        cy, cx = random.randrange(h), random.randrange(w)
        y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, h)
        x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, w)
        mixed_x = x.clone()
        mixed_x[:, :, y0:y1, x0:x1] = prev_x[:, :, y0:y1, x0:x1]
        lam = 1 - (y1 - y0) * (x1 - x0) / (h * w)
        mixed_y = lam * y + (1 - lam) * prev_y
    _previous.append((x, y))
    return mixed_x, mixed_y


@case("leak", leak_in=gpu_augment)
def cutmix_partner_kept_in_mutable_default():
    """CutMix with the previous batch, remembered in a mutable default argument
    (`_previous=[]`) that is appended to and never trimmed: every batch (12 MiB) stays."""
    torch.manual_seed(0)
    random.seed(0)
    model = nn.Sequential(conv_bn(3, 32), conv_bn(32, 64, 2), conv_bn(64, 128, 2),
                          conv_bn(128, 256, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Dropout(0.2), nn.Linear(256, 100)).cuda()
    loader = DataLoader(synthetic_images(8192, 64, 100), batch_size=256, shuffle=True,
                        num_workers=0, drop_last=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[30, 60], gamma=0.1)
    for epoch in range(90):
        model.train()
        for images, labels in loader:
            x, y = gpu_augment(images, labels)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        scheduler.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")


class CompressedActivations:
    """saved_tensors_hooks that keep activations saved for backward in bfloat16 to halve
    activation memory (after the 'Hooks for saved tensors' tutorial, with a dict as the
    store)."""

    def __init__(self):
        self.store = {}
        self.next_key = 0

    def pack(self, tensor):
        key = self.next_key
        self.next_key += 1
        if tensor.is_floating_point():
            self.store[key] = (tensor.dtype, tensor.detach().to(torch.bfloat16))  # LEAK: unpack reads the entry but nothing deletes it: ~50 MiB of copies a step
        else:
            self.store[key] = (tensor.dtype, tensor)
        return key

    def unpack(self, key):
        dtype, tensor = self.store[key]
        return tensor.to(dtype)

    def __call__(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


@case("leak", leak_in=CompressedActivations)
def saved_tensor_hooks_store_never_emptied():
    """Pack hooks copy each saved tensor to bfloat16 into a dict that unpack never deletes
    from: 5 linear inputs and 4 ReLU outputs (4 MiB each), 4 weights (8 MiB) and the
    log-probabilities (saved twice, 8 MiB), about 52 MiB a step."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
        nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
        nn.Linear(1024, 1000)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    compress = CompressedActivations()
    for step in range(100000):
        x = torch.randn(2048, 1024, device="cuda")
        y = torch.randint(0, 1000, (2048,), device="cuda")
        with compress():
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.3f}")


# ---------------------------------------------------------------------------------------
# Genuine peaks
# ---------------------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention written out by hand (no fused kernel)."""

    def __init__(self, d_model, n_head, dropout=0.1):
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = self.drop(F.softmax(att.masked_fill(mask, float("-inf")), dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class GPTBlock(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class MiniGPT(nn.Module):
    def __init__(self, vocab, block_size, d_model=512, n_head=8, layers=6):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.blocks = nn.Sequential(*(GPTBlock(d_model, n_head) for _ in range(layers)))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


@case("genuine peak")
def hand_written_attention_long_context():
    """A nanoGPT-style model with hand-written attention and the context raised to 8192
    tokens: the first layer's scores alone are 4 x 8 x 8192 x 8192 floats, 8 GiB, on the
    very first forward."""
    torch.manual_seed(0)
    vocab, block_size, batch_size = 16384, 8192, 4
    model = MiniGPT(vocab, block_size).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95))
    data = torch.randint(0, vocab, (4_000_000,))
    for it in range(1000):
        starts = torch.randint(0, len(data) - block_size - 1, (batch_size,))
        chunk = torch.stack([data[s:s + block_size + 1] for s in starts.tolist()]).cuda()
        logits = model(chunk[:, :-1])  # LEAK: 8 GiB of attention scores in the first layer (a peak, not a leak)
        loss = F.cross_entropy(logits.view(-1, vocab), chunk[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"iter {it} loss {loss.item():.3f}")


class TinySegNet(nn.Module):
    def __init__(self, classes=6):
        super().__init__()
        self.enc1 = conv_bn(3, 32)
        self.enc2 = conv_bn(32, 64, 2)
        self.enc3 = conv_bn(64, 128, 2)
        self.dec2 = conv_bn(128 + 64, 64)
        self.dec1 = conv_bn(64 + 32, 32)
        self.out = nn.Conv2d(32, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        e3 = self.enc3(e2)
        d2 = self.dec2(torch.cat([F.interpolate(e3, scale_factor=2.0), e2], dim=1))
        d1 = self.dec1(torch.cat([F.interpolate(d2, scale_factor=2.0), e1], dim=1))
        return self.out(d1)


def evaluate_tiles(model, tiles, masks):
    model.eval()
    with torch.no_grad():
        logits = model(normalize(tiles))  # LEAK: 4 x 3 x 2048 x 2048 tiles through full-resolution convs (a peak, not a leak)
        return (logits.argmax(dim=1) == masks.cuda()).float().mean().item()


@case("genuine peak", leak_in=evaluate_tiles)
def segmentation_validation_at_full_resolution():
    """Trained on 128 x 128 crops (fits easily), validated after the first epoch on whole
    2048 x 2048 tiles: the first conv's output is 4 x 32 x 2048 x 2048 floats, 2 GiB, and
    its BatchNorm needs as much again: a one-off peak."""
    torch.manual_seed(0)
    model = TinySegNet().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    crops = torch.randint(0, 256, (960, 3, 128, 128), dtype=torch.uint8, generator=g)
    crop_masks = torch.randint(0, 6, (960, 128, 128), generator=g)
    loader = DataLoader(TensorDataset(crops, crop_masks), batch_size=16, shuffle=True,
                        num_workers=0)
    val_tiles = torch.randint(0, 256, (4, 3, 2048, 2048), dtype=torch.uint8, generator=g)
    val_masks = torch.randint(0, 6, (4, 2048, 2048), generator=g)
    for epoch in range(20):
        model.train()
        for images, masks in loader:
            logits = model(normalize(images))
            loss = F.cross_entropy(logits, masks.cuda(non_blocking=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.3f} "
              f"val pixel acc {evaluate_tiles(model, val_tiles, val_masks):.3f}")


class TwoTowerRecommender(nn.Module):
    def __init__(self, users=200_000, items=600_000, dim=512):
        super().__init__()
        self.users = nn.Embedding(users, dim, device="cuda")
        self.items = nn.Embedding(items, dim, device="cuda")

    def forward(self, user_ids, item_ids):
        return (self.users(user_ids) * self.items(item_ids)).sum(dim=-1)


@case("genuine peak")
def adam_state_for_large_embeddings_at_first_step():
    """Two dense embedding tables of 800k x 512 floats (1.5 GiB) and their dense gradients
    (1.5 GiB) fit; Adam's exp_avg and exp_avg_sq, made at the first optimizer.step(), need
    3 GiB more: an OOM at the first step, never any growth."""
    torch.manual_seed(0)
    model = TwoTowerRecommender()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(1000):
        users = torch.randint(0, 200_000, (4096,), device="cuda")
        items = torch.randint(0, 600_000, (4096,), device="cuda")
        clicks = torch.randint(0, 2, (4096,), device="cuda").float()
        loss = F.binary_cross_entropy_with_logits(model(users, items), clicks)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # LEAK: Adam's state for 410M parameters, 3 GiB at once (a peak, not a leak)
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


class Documents(Dataset):
    """Token documents of 64-512 tokens, plus one scraped page of 60000 tokens that no one
    filtered out."""

    def __init__(self, n=4000, vocab=4096):
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(64, 513, (n,), generator=g).tolist()
        lengths[2500] = 60000
        self.docs = [torch.randint(1, vocab, (length,), generator=g) for length in lengths]

    def __len__(self):
        return len(self.docs)

    def __getitem__(self, i):
        return self.docs[i]


class GRULanguageModel(nn.Module):
    def __init__(self, vocab=4096, emb=256, hidden=512):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.gru = nn.GRU(emb, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        h, _ = self.gru(self.embed(tokens))
        return self.out(h)


@case("genuine peak")
def pathological_long_document_mid_epoch():
    """A GRU language model over documents padded per batch; one document of 60000 tokens
    lands in one batch of the first epoch, which is padded to it: 32 x 60000 embeddings
    (1.8 GiB) and GRU outputs (3.7 GiB) in one step, after dozens of ordinary ones."""
    torch.manual_seed(0)
    loader = DataLoader(Documents(), batch_size=32, shuffle=True, num_workers=0,
                        generator=torch.Generator().manual_seed(0),
                        collate_fn=lambda docs: nn.utils.rnn.pad_sequence(docs, batch_first=True))
    model = GRULanguageModel().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(10):
        for step, batch in enumerate(loader):
            tokens = batch.cuda(non_blocking=True)
            logits = model(tokens[:, :-1])  # LEAK: the batch padded to 60000 tokens (a peak, not a leak)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                   tokens[:, 1:].reshape(-1), ignore_index=0)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if step % 20 == 0:
                print(f"epoch {epoch} step {step} len {tokens.size(1)} loss {loss.item():.3f}")


class TiedCausalLM(nn.Module):
    """Small decoder (nn.TransformerEncoder with a causal mask) with a multilingual
    vocabulary and tied input/output embeddings."""

    def __init__(self, vocab=256_000, d_model=512, nhead=8, layers=2, max_len=1024):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, 4 * d_model, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.decoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, tokens):
        T = tokens.size(1)
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=tokens.device)
        h = self.embed(tokens) + self.pos(torch.arange(T, device=tokens.device))
        h = self.norm(self.decoder(h, mask=mask))
        return F.linear(h, self.embed.weight)


@case("genuine peak")
def amp_logits_over_large_vocabulary():
    """fp16 autocast + GradScaler on a small decoder with a 256k-token vocabulary: the
    logits of one 16 x 1024 batch are 16 x 1024 x 256000 halves, 7.8 GiB, on the first
    step."""
    torch.manual_seed(0)
    model = TiedCausalLM().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    for step in range(500):
        tokens = torch.randint(0, 256_000, (16, 1025), device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            logits = model(tokens[:, :-1])  # LEAK: 7.8 GiB of logits (a peak, not a leak)
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)),
                                   tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        print(f"step {step} loss {loss.item():.3f}")


# ---------------------------------------------------------------------------------------
# No leaks
# ---------------------------------------------------------------------------------------

class SinusoidalPositions(nn.Module):
    """Sinusoidal position table, computed once per sequence length and kept as a
    (non-persistent) buffer named after the length."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        T = x.size(1)
        name = f"table_{T}"
        if not hasattr(self, name):
            pos = torch.arange(T, device=x.device, dtype=torch.float32).unsqueeze(1)
            freq = torch.exp(torch.arange(0, self.dim, 2, device=x.device, dtype=torch.float32)
                             * (-math.log(10000.0) / self.dim))
            table = torch.zeros(T, self.dim, device=x.device)
            table[:, 0::2] = torch.sin(pos * freq)
            table[:, 1::2] = torch.cos(pos * freq)
            self.register_buffer(name, table, persistent=False)
        return x + getattr(self, name)


class BucketedTextClassifier(nn.Module):
    def __init__(self, vocab=16000, d_model=256, nhead=8, layers=4, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=0)
        self.positions = SinusoidalPositions(d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, 4 * d_model, dropout=0.1,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, tokens):
        pad = tokens == 0
        h = self.encoder(self.positions(self.embed(tokens)), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(dim=1) / keep.sum(dim=1))


def bucketed_batch(batch_size=32, vocab=16000, bucket=32, max_len=256, classes=4):
    """A batch of random-length sequences, padded up to a multiple of `bucket`."""
    lengths = torch.randint(8, max_len + 1, (batch_size,))
    T = bucket * math.ceil(int(lengths.max()) / bucket)
    tokens = torch.randint(1, vocab, (batch_size, T))
    tokens[torch.arange(T).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    labels = torch.randint(0, classes, (batch_size,))
    return tokens.cuda(non_blocking=True), labels.cuda(non_blocking=True)


@case("no leak")
def position_tables_registered_per_bucketed_length():
    """Variable-length batches padded to multiples of 32, and a position table registered
    as a new buffer the first time each length comes: memory grows for the first few
    dozen steps (8 lengths, and the allocator's blocks for each shape), then is flat."""
    torch.manual_seed(0)
    model = BucketedTextClassifier().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=500, gamma=0.5)
    for step in range(1500):
        model.train()
        tokens, labels = bucketed_batch()
        loss = F.cross_entropy(model(tokens), labels)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % 500 == 499:
            model.eval()
            outputs, targets = [], []
            with torch.no_grad():
                for _ in range(20):
                    tokens, labels = bucketed_batch()
                    outputs.append(model(tokens).cpu())
                    targets.append(labels.cpu())
            acc = accuracy(torch.cat(outputs), torch.cat(targets))
            tables = sum(1 for n, _ in model.named_buffers() if "table_" in n)
            print(f"step {step} loss {loss.item():.3f} val acc {acc:.3f} tables {tables}")


@case("no leak")
def recent_batches_in_bounded_deque_for_nan_debugging():
    """AMP CNN training that keeps the last 64 batches and their (detached) logits in a
    deque(maxlen=64) to dump if the loss goes non-finite: memory grows for 64 steps (3 MiB
    a batch, ~200 MiB in all) and then stays flat."""
    torch.manual_seed(0)
    model = nn.Sequential(conv_bn(3, 64), conv_bn(64, 128, 2), conv_bn(128, 256, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10)).cuda()
    model = model.to(memory_format=torch.channels_last)
    loader = DataLoader(synthetic_images(12800, 32, 10), batch_size=256, shuffle=True,
                        num_workers=0, drop_last=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    recent = collections.deque(maxlen=64)
    for epoch in range(40):
        for images, labels in loader:
            x = normalize(images).contiguous(memory_format=torch.channels_last)
            y = labels.cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.float16):
                logits = model(x)
                loss = F.cross_entropy(logits, y)
            recent.append((x, y, logits.detach()))
            if not math.isfinite(loss.item()):
                torch.save(list(recent), os.path.join(tempfile.gettempdir(), "bad_batches.pt"))
                raise RuntimeError("non-finite loss")
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        print(f"epoch {epoch} loss {loss.item():.3f} kept {len(recent)}")


class DenoisingAutoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.ReLU())
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(32, 1, 4, stride=2, padding=1), nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))


@case("no leak")
def hardest_examples_heap_of_batch_views():
    """A denoising autoencoder keeps its 64 worst-reconstructed inputs in a heap; each is
    a view that keeps its whole 4 MiB batch alive, but the heap never holds more than 64,
    so at most 64 batches (256 MiB) stay: growth early on, then a plateau."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    clean = torch.rand(16384, 1, 64, 64, generator=g)
    loader = DataLoader(TensorDataset(clean), batch_size=256, shuffle=True, num_workers=0)
    model = DenoisingAutoencoder().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    heap, counter, capacity = [], 0, 64
    for epoch in range(30):
        for (batch,) in loader:
            x = batch.cuda(non_blocking=True)
            noisy = (x + 0.2 * torch.randn_like(x)).clamp(0, 1)
            recon = model(noisy)
            per_sample = F.mse_loss(recon, x, reduction="none").mean(dim=(1, 2, 3))
            loss = per_sample.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            worst = per_sample.detach().topk(4)
            for value, i in zip(worst.values.tolist(), worst.indices.tolist()):
                item = (value, counter, x[i])
                counter += 1
                if len(heap) < capacity:
                    heapq.heappush(heap, item)
                else:
                    heapq.heappushpop(heap, item)
        print(f"epoch {epoch} loss {loss.item():.4f} worst kept {heap[0][0]:.4f}..")


class CachedTabularTrainer:
    """Regression MLP over a table held in host memory; each batch is copied to the device
    the first time it is read and served from the device afterwards."""

    def __init__(self, features, targets, batch_size=4096):
        torch.manual_seed(0)
        self.features, self.targets, self.batch_size = features, targets, batch_size
        self.num_batches = len(features) // batch_size
        self.device_batches = {}
        self.model = nn.Sequential(
            nn.Linear(features.size(1), 1024), nn.SiLU(), nn.Dropout(0.1),
            nn.Linear(1024, 1024), nn.SiLU(), nn.Dropout(0.1),
            nn.Linear(1024, 1)).cuda()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            self.optimizer, factor=0.5, patience=1)
        self.log = logging.getLogger("tabular")

    def batch(self, index):
        if index not in self.device_batches:
            rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
            self.device_batches[index] = (self.features[rows].cuda(),
                                          self.targets[rows].cuda())
        return self.device_batches[index]

    def validate(self, features, targets):
        self.model.eval()
        total = 0.0
        with torch.no_grad():
            for start in range(0, len(features), self.batch_size):
                x = features[start:start + self.batch_size].cuda()
                y = targets[start:start + self.batch_size].cuda()
                total += F.mse_loss(self.model(x), y, reduction="sum").item()
        return total / len(features)

    def fit(self, epochs, val_features, val_targets):
        for epoch in range(epochs):
            self.model.train()
            for index in torch.randperm(self.num_batches).tolist():
                x, y = self.batch(index)
                loss = F.mse_loss(self.model(x), y)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
            val = self.validate(val_features, val_targets)
            self.scheduler.step(val)
            self.log.info("epoch %d train %.4f val %.4f cached %d batches (%.0f MiB)",
                          epoch, loss.item(), val, len(self.device_batches),
                          torch.cuda.memory_allocated() / MiB)


@case("no leak")
def dataset_moved_to_device_during_first_epoch():
    """The training table (60 batches of 4096 x 256 floats, 240 MiB) is copied to the
    device batch by batch as the first epoch reads it: memory grows through the whole
    first epoch and is flat for the nine after."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    g = torch.Generator().manual_seed(0)
    weights = torch.randn(256, 1, generator=g)
    features = torch.randn(60 * 4096 + 8192, 256, generator=g)
    targets = features @ weights + 0.1 * torch.randn(len(features), 1, generator=g)
    trainer = CachedTabularTrainer(features[:60 * 4096], targets[:60 * 4096])
    trainer.fit(10, features[60 * 4096:], targets[60 * 4096:])


class PreNormBlock(nn.Module):
    def __init__(self, d_model, nhead, dropout=0.1):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Dropout(dropout), nn.Linear(4 * d_model, d_model))

    def forward(self, x, pad_mask):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, key_padding_mask=pad_mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class CheckpointedEncoder(nn.Module):
    def __init__(self, vocab=20000, d_model=384, nhead=6, layers=6, classes=8, max_len=512):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, max_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(PreNormBlock(d_model, nhead) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, tokens):
        pad = tokens == 0
        x = self.embed(tokens) + self.pos[:, :tokens.size(1)]
        for block in self.blocks:
            if self.training:
                x = checkpoint(block, x, pad, use_reentrant=False)
            else:
                x = block(x, pad)
        return self.head(self.norm(x)[:, 0])


def random_length_batch(batch_size=32, vocab=20000, classes=8):
    lengths = torch.randint(16, 385, (batch_size,))
    T = int(lengths.max())
    tokens = torch.randint(1, vocab, (batch_size, T))
    tokens[torch.arange(T).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    labels = tokens[:, 0] % classes
    return tokens.cuda(non_blocking=True), labels.cuda(non_blocking=True)


@case("no leak")
def checkpointed_amp_transformer_with_variable_lengths():
    """Activation checkpointing, fp16 autocast with a GradScaler, a warm-restart schedule
    and batches of a new length every step; the loss history is floats and each epoch's
    evaluation moves its logits to the host: every step's size differs, none is kept."""
    torch.manual_seed(0)
    model = CheckpointedEncoder().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=2)
    scaler = torch.amp.GradScaler("cuda")
    steps_per_epoch, losses = 300, []
    for epoch in range(4):
        model.train()
        for i in range(steps_per_epoch):
            tokens, labels = random_length_batch()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.cross_entropy(model(tokens), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step(epoch + i / steps_per_epoch)
            losses.append(loss.item())
        model.eval()
        all_logits, all_labels = [], []
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
            for _ in range(20):
                tokens, labels = random_length_batch()
                all_logits.append(model(tokens).float().cpu())
                all_labels.append(labels.cpu())
        acc = accuracy(torch.cat(all_logits), torch.cat(all_labels))
        recent = losses[-steps_per_epoch:]
        print(f"epoch {epoch} loss {sum(recent) / len(recent):.3f} val acc {acc:.3f}")


class LSTMLanguageModel(nn.Module):
    """The word_language_model example's LSTM: (T, B) batches, a state carried across
    batches."""

    def __init__(self, vocab=10000, emb=400, hidden=1024, layers=2, dropout=0.3):
        super().__init__()
        self.layers, self.hidden = layers, hidden
        self.drop = nn.Dropout(dropout)
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, layers, dropout=dropout)
        self.decoder = nn.Linear(hidden, vocab)

    def init_hidden(self, batch_size):
        weight = next(self.parameters())
        return (weight.new_zeros(self.layers, batch_size, self.hidden),
                weight.new_zeros(self.layers, batch_size, self.hidden))

    def forward(self, tokens, hidden):
        out, hidden = self.lstm(self.drop(self.embed(tokens)), hidden)
        return self.decoder(self.drop(out)), hidden


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def batchify(data, batch_size):
    columns = data.size(0) // batch_size
    return data[:columns * batch_size].view(batch_size, -1).t().contiguous().cuda()


@case("no leak")
def stateful_lstm_truncated_bptt_detached_state():
    """Truncated BPTT with the LSTM state carried from batch to batch, detached each time
    (repackage_hidden), and a smoothed loss kept as a detached device scalar that is
    replaced every step: state crosses steps but no graph or history does."""
    torch.manual_seed(0)
    vocab, batch_size, bptt = 10000, 32, 70
    train = batchify(torch.randint(0, vocab, (500_000,)), batch_size)
    valid = batchify(torch.randint(0, vocab, (50_000,)), 10)
    model = LSTMLanguageModel(vocab).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=20.0)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.5)
    smoothed = None
    for epoch in range(5):
        model.train()
        hidden = model.init_hidden(batch_size)
        for batch, i in enumerate(range(0, train.size(0) - 1, bptt)):
            seq_len = min(bptt, train.size(0) - 1 - i)
            data, targets = train[i:i + seq_len], train[i + 1:i + 1 + seq_len].reshape(-1)
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = F.cross_entropy(output.view(-1, vocab), targets)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            optimizer.step()
            smoothed = loss.detach() if smoothed is None else 0.98 * smoothed + 0.02 * loss.detach()
            if batch % 100 == 0:
                print(f"epoch {epoch} batch {batch} ppl {math.exp(smoothed.item()):.1f}")
        model.eval()
        total, hidden = 0.0, model.init_hidden(10)
        with torch.no_grad():
            for i in range(0, valid.size(0) - 1, bptt):
                seq_len = min(bptt, valid.size(0) - 1 - i)
                output, hidden = model(valid[i:i + seq_len], hidden)
                total += seq_len * F.cross_entropy(
                    output.view(-1, vocab), valid[i + 1:i + 1 + seq_len].reshape(-1)).item()
        print(f"epoch {epoch} valid ppl {math.exp(total / (valid.size(0) - 1)):.1f}")
        scheduler.step()


# =======================================================================================
# Second round: scripts with no optimizer, leaks in a periodic phase or on some steps,
# slow leaks, threads, and peaks that look like growth or surface from a library
# =======================================================================================

# ---------------------------------------------------------------------------------------
# Leaks
# ---------------------------------------------------------------------------------------

def feature_classifier(in_features=2048, width=4096, classes=1000):
    """A classifier head over precomputed (pooled) image features, as served in production."""
    return nn.Sequential(nn.Linear(in_features, width), nn.GELU(), nn.Dropout(0.2),
                         nn.Linear(width, width), nn.GELU(), nn.Dropout(0.2),
                         nn.Linear(width, classes))


def feature_requests(batches, in_features=2048, max_size=512, variable=False, seed=0):
    """Request batches as they reach the server: host tensors of pooled features."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(batches):
        size = int(torch.randint(1, max_size + 1, (1,), generator=g)) if variable else max_size
        yield torch.randn(size, in_features, generator=g)


class ConfidenceGate:
    """Serves a classifier and answers -1 ("unsure") for requests whose confidence is
    below a threshold that follows the traffic (a running mean of the confidences)."""

    def __init__(self, model, momentum=0.99):
        self.model = model.eval()
        self.momentum = momentum
        self.threshold = torch.tensor(0.0, device="cuda")

    def __call__(self, feats):
        logits = self.model(feats.cuda(non_blocking=True))  # LEAK: the forward's saved activations (~38 MiB for 512 requests) are kept: each new self.threshold hangs on the last one's graph (eval() but no torch.no_grad)
        conf, labels = logits.softmax(dim=-1).max(dim=-1)
        accepted = conf >= self.threshold
        self.threshold = self.momentum * self.threshold + (1 - self.momentum) * conf.mean()
        return torch.where(accepted, labels, -1).tolist()


@case("leak", leak_in=ConfidenceGate)
def serving_gate_threshold_without_no_grad():
    """An inference server (no optimizer, no backward) in eval mode but without
    torch.no_grad: the adaptive threshold is a tensor computed from the confidences, so
    every request batch's graph, with its saved activations (~38 MiB), stays alive."""
    torch.manual_seed(0)
    gate = ConfidenceGate(feature_classifier().cuda())
    served = unsure = 0
    for i, feats in enumerate(feature_requests(100000)):
        answers = gate(feats)
        served += len(answers)
        unsure += sum(1 for a in answers if a < 0)
        if i % 20 == 0:
            print(f"batch {i} served {served} unsure {unsure / served:.1%} "
                  f"threshold {gate.threshold.item():.4f}")


def stochastic_volatility_returns(steps, phi=0.98, sigma=0.15, beta=0.7, seed=0):
    """Daily returns of a log-volatility AR(1) model, simulated on the host."""
    g = torch.Generator().manual_seed(seed)
    h, returns = 0.0, []
    for e1, e2 in torch.randn(steps, 2, generator=g).tolist():
        h = phi * h + sigma * e1
        returns.append(beta * math.exp(h / 2) * e2)
    return returns


@case("leak")
def particle_filter_keeps_ancestry_for_smoothing():
    """A bootstrap particle filter (2^17 particles, pure tensor ops) over a long series
    keeps every step's ancestor indices for a backward pass meant to trace the surviving
    paths once the series ends: a slow leak of 1 MiB a step, about 4000 fast steps."""
    torch.manual_seed(0)
    n, phi, sigma, beta = 1 << 17, 0.98, 0.15, 0.7
    returns = stochastic_volatility_returns(50_000, phi, sigma, beta)
    x = torch.randn(n, device="cuda") * (sigma / math.sqrt(1 - phi ** 2))
    positions = torch.arange(n, device="cuda", dtype=torch.float32)
    genealogy, loglik = [], 0.0
    for t, y in enumerate(returns):
        x = phi * x + sigma * torch.randn_like(x)
        logw = -0.5 * x - 0.5 * (y / beta) ** 2 * torch.exp(-x)
        top = logw.max()
        w = torch.exp(logw - top)
        loglik += (top + torch.log(w.mean())).item() - 0.5 * math.log(2 * math.pi * beta ** 2)
        cdf = torch.cumsum(w, dim=0)
        u = (positions + torch.rand(1, device="cuda")) * (cdf[-1] / n)
        ancestors = torch.searchsorted(cdf, u).clamp_(max=n - 1)  # LEAK: 2^17 int64 (1 MiB) a step, kept by genealogy for the backward trace
        genealogy.append(ancestors)
        x = x[ancestors]
        if t % 500 == 0:
            print(f"t {t} loglik {loglik:.1f} mean log-vol {x.mean().item():+.3f}")


@case("leak")
def manual_sgd_backward_with_create_graph():
    """Plain SGD written by hand (no optimizer), with backward(create_graph=True) left on
    for a gradient penalty that is switched off, and the gradients zeroed in place: each
    backward adds the new gradient to the old one out of place, with a graph, so every
    step's forward and backward tensors (~25 MiB) stay reachable from p.grad."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.Tanh(), nn.Linear(4096, 4096), nn.Tanh(),
                          nn.Linear(4096, 10)).cuda()
    params = list(model.parameters())
    lr, grad_penalty = 0.05, 0.0
    teacher = torch.randn(1024, 10, device="cuda")
    for step in range(100000):
        x = torch.randn(256, 1024, device="cuda")
        y = (x @ teacher).argmax(dim=1)
        loss = F.cross_entropy(model(x), y)
        # create_graph so that the gradient-norm penalty below can be differentiated
        loss.backward(create_graph=True)  # LEAK: the backward's saved tensors and the forward's (~25 MiB), kept by p.grad = p.grad + g, which chains every step's graph
        if grad_penalty > 0:
            penalty = sum(p.grad.pow(2).sum() for p in params)
            (grad_penalty * penalty).backward()
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
                p.grad.zero_()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.3f}")


class SnapshotEnsembleTrainer:
    """Cosine cycles with warm restarts; at the end of each cycle the model's validation
    logits join an ensemble (snapshot ensembling, without saving the models)."""

    def __init__(self, in_features=512, width=2048, classes=1000, cycle=25):
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(in_features, width), nn.ReLU(),
                                   nn.Linear(width, width), nn.ReLU(),
                                   nn.Linear(width, classes)).cuda()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9,
                                         weight_decay=5e-4)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
            self.optimizer, T_0=cycle)
        self.cycle = cycle
        self.snapshot_logits = []

    def train_step(self, x, y):
        loss = F.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def snapshot(self, val_x, val_y):
        self.model.eval()
        chunks = [self.model(val_x[i:i + 1024]) for i in range(0, len(val_x), 1024)]
        val_logits = torch.cat(chunks)  # LEAK: 8192 x 1000 floats (31 MiB) at each cycle's end, kept by self.snapshot_logits
        self.snapshot_logits.append(val_logits)
        ensemble = sum(logits.softmax(dim=-1) for logits in self.snapshot_logits)
        self.model.train()
        return accuracy(val_logits, val_y), accuracy(ensemble, val_y)


@case("leak", leak_in=SnapshotEnsembleTrainer)
def snapshot_ensemble_keeps_validation_logits():
    """Training itself is clean; every 25 steps a validation keeps the whole validation
    set's logits on the device as a new ensemble member, so memory steps up by 31 MiB at
    each validation and is flat in between."""
    trainer = SnapshotEnsembleTrainer()
    teacher = torch.randn(512, 1000, device="cuda")
    val_x = torch.randn(8192, 512, device="cuda")
    val_y = (val_x @ teacher).argmax(dim=1)
    for step in range(1, 1_000_000):
        x = torch.randn(512, 512, device="cuda")
        loss = trainer.train_step(x, (x @ teacher).argmax(dim=1))
        if step % trainer.cycle == 0:
            single, ensemble = trainer.snapshot(val_x, val_y)
            print(f"step {step} loss {loss:.3f} val acc {single:.3f} "
                  f"ensemble of {len(trainer.snapshot_logits)} {ensemble:.3f}")


class SparseFactorizationModel(nn.Module):
    """Recommender with user and item embeddings that produce sparse gradients (for
    SparseAdam), and a small MLP over the pair."""

    def __init__(self, users, items, dim=64):
        super().__init__()
        self.users = nn.Embedding(users, dim, sparse=True)
        self.items = nn.Embedding(items, dim, sparse=True)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, user_ids, item_ids):
        pair = torch.cat([self.users(user_ids), self.items(item_ids)], dim=-1)
        return self.mlp(pair).squeeze(-1)


@case("leak")
def sparse_embedding_grads_never_zeroed():
    """Two optimizers, SparseAdam for the embeddings and Adam for the MLP, but only the
    dense one is zeroed: sparse gradients accumulate by concatenation (never coalesced in
    place), 2 x 2048 rows of 64 floats (1 MiB) more each step: a slow leak."""
    torch.manual_seed(0)
    users, items, batch_size = 200_000, 100_000, 2048
    model = SparseFactorizationModel(users, items).cuda()
    sparse_opt = torch.optim.SparseAdam(
        list(model.users.parameters()) + list(model.items.parameters()), lr=1e-3)
    dense_opt = torch.optim.Adam(model.mlp.parameters(), lr=1e-3)
    true_users = torch.randn(users, 16, device="cuda")
    true_items = torch.randn(items, 16, device="cuda")
    for step in range(1_000_000):
        u = torch.randint(0, users, (batch_size,), device="cuda")
        i = torch.randint(0, items, (batch_size,), device="cuda")
        clicks = ((true_users[u] * true_items[i]).sum(dim=-1) > 0).float()
        loss = F.binary_cross_entropy_with_logits(model(u, i), clicks)
        dense_opt.zero_grad()
        loss.backward()  # LEAK: the embeddings' sparse grads are never zeroed (sparse_opt.zero_grad() is missing): each backward's rows (1 MiB) are concatenated onto them
        dense_opt.step()
        sparse_opt.step()
        if step % 200 == 0:
            print(f"step {step} loss {loss.item():.4f} "
                  f"user grad rows {model.users.weight.grad._nnz()}")


def mixed_difficulty_batch(batch_size=8, vocab=4096, period=8):
    """Sequences of a random length (64-512), each either random tokens (hard) or a short
    motif repeated (easy); the share of hard ones varies from batch to batch."""
    T = random.randint(64, 512)
    hard = torch.rand(batch_size, 1) < random.random()
    motif = torch.randint(1, vocab, (batch_size, period))
    repeated = motif.repeat(1, T // period + 2)[:, :T + 1]
    noise = torch.randint(1, vocab, (batch_size, T + 1))
    return torch.where(hard, noise, repeated).cuda(non_blocking=True)


@case("leak")
def above_average_loss_batches_kept_with_logits():
    """A GRU language model keeps, for a look at the end of training, the batches whose
    loss is above its running mean, with their logits: half or more of the steps keep 8 x
    T x 4096 floats, 8 to 64 MiB as the length varies, the others nothing."""
    torch.manual_seed(0)
    random.seed(0)
    model = GRULanguageModel(vocab=4096).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    running, above_average = None, []
    for step in range(1_000_000):
        tokens = mixed_difficulty_batch()
        logits = model(tokens[:, :-1])  # LEAK: 8 x T x 4096 floats (8-64 MiB), kept by above_average on the steps whose loss is above its running mean
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        value = loss.item()
        if running is not None and value > running:
            above_average.append((tokens, logits.detach()))
        running = value if running is None else 0.95 * running + 0.05 * value
        if step % 20 == 0:
            print(f"step {step} len {tokens.size(1) - 1} loss {value:.3f} "
                  f"running {running:.3f} kept {len(above_average)}")


@case("leak")
def accumulated_gradients_kept_every_third_step():
    """Gradient accumulation over 3 micro-batches; at each optimizer step, every third
    micro-batch, the flattened accumulated gradient (4.2M floats, 16 MiB) is kept to
    estimate the gradient noise scale: growth on one step in three only."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    accumulation, grad_history = 3, []
    teacher = torch.randn(1024, 10, device="cuda")
    for micro_step in range(1_000_000):
        x = torch.randn(512, 1024, device="cuda")
        y = (x @ teacher).argmax(dim=1)
        loss = F.cross_entropy(model(x), y) / accumulation
        loss.backward()
        if (micro_step + 1) % accumulation:
            continue
        flat = torch.cat([p.grad.flatten() for p in model.parameters()])  # LEAK: 16 MiB every third micro-step, kept by grad_history
        grad_history.append(flat)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if len(grad_history) % 50 == 0:
            recent = torch.stack(grad_history[-8:])
            noise, signal = recent.var(dim=0).sum(), recent.mean(dim=0).pow(2).sum()
            print(f"update {len(grad_history)} loss {loss.item() * accumulation:.3f} "
                  f"noise/signal {(noise / signal).item():.2f}")


class DistillationTrainer:
    """Distils a frozen teacher into a smaller student over a fixed, unshuffled set of
    batches; the teacher's logits are cached by batch index, and the mean norm of the
    student's features is traced for a drift plot."""

    def __init__(self, teacher, body, head, temperature=4.0):
        self.teacher = teacher.eval().requires_grad_(False)
        self.body, self.head = body, head
        params = list(body.parameters()) + list(head.parameters())
        self.optimizer = torch.optim.AdamW(params, lr=1e-3)
        self.temperature = temperature
        self.teacher_cache = {}
        self.feature_norms = []

    def teacher_logits(self, index, x):
        if index not in self.teacher_cache:
            with torch.no_grad():
                # 1024 x 2048 floats (8 MiB) per batch index: 40 batches, 320 MiB at most
                self.teacher_cache[index] = self.teacher(x)
        return self.teacher_cache[index]

    def step(self, index, x):
        feats = self.body(x)  # LEAK: 1024 x 2048 floats (8 MiB), saved by the norm taken outside torch.no_grad and kept by self.feature_norms
        logits = self.head(feats)
        target = self.teacher_logits(index, x)
        T = self.temperature
        soft = F.kl_div(F.log_softmax(logits / T, dim=-1), F.softmax(target / T, dim=-1),
                        reduction="batchmean") * T * T
        loss = 0.5 * soft + 0.5 * F.cross_entropy(logits, target.argmax(dim=-1))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.feature_norms.append(feats.norm(dim=1).mean())
        return loss.item()


@case("leak", leak_in=DistillationTrainer)
def distillation_cache_plateaus_beside_feature_norm_trace():
    """Two kinds of growth: a teacher-logit cache that fills during the first epoch (40
    batches, 320 MiB) and then stays flat, and beside it the feature-norm trace, kept as
    graph-holding tensors, which keeps each step's student features (8 MiB) for good."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    features = torch.randn(40 * 1024, 1024, generator=g)
    loader = DataLoader(TensorDataset(features), batch_size=1024, shuffle=False,
                        num_workers=0)
    teacher = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                            nn.Linear(4096, 2048)).cuda()
    body = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048),
                         nn.ReLU()).cuda()
    trainer = DistillationTrainer(teacher, body, nn.Linear(2048, 2048).cuda())
    for epoch in range(1000):
        for index, (x,) in enumerate(loader):
            loss = trainer.step(index, x.cuda(non_blocking=True))
        print(f"epoch {epoch} loss {loss:.3f} cached {len(trainer.teacher_cache)} batches "
              f"allocated {torch.cuda.memory_allocated() / MiB:.0f} MiB")


class GpuAugmentThread(threading.Thread):
    """Feeds training from a background thread: samples a batch of the uint8 images held
    on the device, crops, flips and normalizes it on the GPU and puts it in `out`; with a
    `previews` queue, each batch goes there too, for the image grids the training loop
    logs. An exception is handed over through `out`, for the training loop to raise."""

    def __init__(self, images, labels, out, previews=None, batch_size=256, crop=56,
                 batches=None):
        super().__init__(daemon=True)
        self.images, self.labels, self.out, self.previews = images, labels, out, previews
        self.batch_size, self.crop, self.batches = batch_size, crop, batches
        self.mean = torch.tensor(IMAGENET_MEAN, device=images.device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(IMAGENET_STD, device=images.device).view(1, 3, 1, 1) * 255

    def run(self):
        try:
            made, margin = 0, self.images.size(-1) - self.crop
            while self.batches is None or made < self.batches:
                idx = torch.randint(0, len(self.images), (self.batch_size,),
                                    device=self.images.device)
                top, left = random.randint(0, margin), random.randint(0, margin)
                batch = self.images[idx, :, top:top + self.crop, left:left + self.crop]
                if random.random() < 0.5:
                    batch = batch.flip(3)
                x = batch.float().sub_(self.mean).div_(self.std)  # LEAK: 256 x 3 x 56 x 56 floats (9 MiB) a batch, kept by the unbounded previews queue, which the training loop reads from only every 50 steps
                self.out.put((x, self.labels[idx]))
                if self.previews is not None:
                    self.previews.put(x)
                made += 1
            self.out.put(None)
        except Exception as exc:  # the training loop raises it
            self.out.put(exc)


def train_from_queue(producer, log_every=50):
    """The training loop on the main thread: takes batches from the producer's queue until
    None; at each log step it also takes a preview batch (meant to be the latest) and logs
    its statistics as an image grid would be."""
    torch.manual_seed(0)
    model = nn.Sequential(conv_bn(3, 32), conv_bn(32, 64, 2), conv_bn(64, 128, 2),
                          conv_bn(128, 256, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(256, 100)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    producer.start()
    step = 0
    while True:
        item = producer.out.get()
        if item is None:
            return step
        if isinstance(item, Exception):
            raise item
        x, y = item
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % log_every == 0:
            line = f"step {step} loss {loss.item():.3f} waiting {producer.out.qsize()}"
            if producer.previews is not None:
                grid = producer.previews.get()[:16]
                line += f" preview mean {grid.mean().item():+.3f} std {grid.std().item():.3f}"
            print(line)
        step += 1


def device_image_set(n=10000, size=64, classes=100):
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, device="cuda")
    return images, torch.randint(0, classes, (n,), device="cuda")


@case("leak", leak_in=GpuAugmentThread)
def producer_thread_fills_unread_preview_queue():
    """A background thread augments batches on the GPU into a bounded training queue and
    also into an unbounded queue.Queue() of previews; it adds a preview every step while
    the training loop takes one only every 50 steps (expecting the latest), so each
    step's batch (9 MiB) stays alive in the preview queue."""
    random.seed(0)
    images, labels = device_image_set()
    train_from_queue(GpuAugmentThread(images, labels, queue.Queue(maxsize=4),
                                      previews=queue.Queue()))


# ---------------------------------------------------------------------------------------
# Genuine peaks
# ---------------------------------------------------------------------------------------

@case("genuine peak")
def sequence_length_curriculum_outgrows_device():
    """A length curriculum for a small nanoGPT-style model (hand-written attention): the
    context doubles every 40 steps from 256 with the batch fixed. Nothing is kept from
    step to step (weights and Adam state stay the same), but each stage needs ~2-4x the
    last one's activations: 1024 tokens fit (~2 GiB), 2048 do not (6 x 4 x 2048^2 floats,
    384 MiB, per attention tensor, several kept per layer)."""
    torch.manual_seed(0)
    vocab, batch_size, max_len = 8192, 6, 8192
    model = MiniGPT(vocab, max_len, d_model=256, n_head=4, layers=4).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, vocab, (4_000_000,))
    seq_len = 256
    for step in range(100000):
        if step and step % 40 == 0 and seq_len < max_len:
            seq_len *= 2
        starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,))
        chunk = torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()]).cuda()
        logits = model(chunk[:, :-1])  # LEAK: attention grows as seq_len^2 with each doubling (a peak, not a leak)
        loss = F.cross_entropy(logits.reshape(-1, vocab), chunk[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step} seq_len {seq_len} loss {loss.item():.3f} "
                  f"peak {torch.cuda.max_memory_allocated() / MiB:.0f} MiB")


@case("genuine peak")
def final_evaluation_on_whole_validation_set():
    """A tabular MLP trains in batches of 2048 (a few hundred MiB), then is scored once at
    the end on the whole validation set in one call: its first layer's output is 500000 x
    2048 floats, 3.8 GiB."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(128, 1, generator=g)
    X = torch.randn(200_000, 128, generator=g)
    y = X @ w + 0.1 * torch.randn(len(X), 1, generator=g)
    X_val = torch.randn(500_000, 128, generator=g)
    y_val = X_val @ w
    X, y = X.cuda(), y.cuda()
    model = nn.Sequential(nn.Linear(128, 2048), nn.SiLU(), nn.Linear(2048, 2048), nn.SiLU(),
                          nn.Linear(2048, 1)).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(5):
        perm = torch.randperm(len(X), device="cuda")
        for i in range(0, len(X), 2048):
            idx = perm[i:i + 2048]
            loss = F.mse_loss(model(X[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} train mse {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        pred = model(X_val.cuda())  # LEAK: 500000 x 2048 floats (3.8 GiB) in the first layer (a peak, not a leak)
        print(f"validation mse {F.mse_loss(pred, y_val.cuda()).item():.4f}")


@case("genuine peak")
def near_duplicate_search_all_pairs_bf16_matmul():
    """No training: a frozen encoder embeds 60000 items in batches (fits easily), then the
    similarities of all pairs come from one bf16 matmul, whose output alone is 60000 x
    60000 halves, 6.7 GiB."""
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 512)).cuda()
    encoder.eval().requires_grad_(False)
    items = torch.randn(60000, 1024, generator=torch.Generator().manual_seed(0))
    chunks = []
    with torch.no_grad():
        for start in range(0, len(items), 4096):
            batch = items[start:start + 4096].cuda(non_blocking=True)
            chunks.append(F.normalize(encoder(batch), dim=-1).to(torch.bfloat16))
    emb = torch.cat(chunks)
    print(f"embedded {len(emb)} items")
    sims = emb @ emb.T  # LEAK: 60000 x 60000 bf16 (6.7 GiB) in one cuBLAS call (a peak, not a leak)
    sims.fill_diagonal_(-1)
    pairs = (sims > 0.95).nonzero()
    print(f"near-duplicate pairs {len(pairs) // 2}")


@case("genuine peak")
def pca_whitening_svd_with_full_matrices():
    """Features of 60000 samples (1024-d, 234 MiB) are whitened by PCA through
    torch.linalg.svd, whose default full_matrices=True asks for U as 60000 x 60000
    floats (13.4 GiB), although only its first 1024 columns are used."""
    torch.manual_seed(0)
    backbone = nn.Sequential(conv_bn(3, 64), conv_bn(64, 128, 2), conv_bn(128, 256, 2),
                             conv_bn(256, 1024, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    backbone = backbone.cuda().eval().requires_grad_(False)
    loader = DataLoader(synthetic_images(60000, 32, 10), batch_size=1000, num_workers=0)
    feats = []
    with torch.no_grad():
        for images, _ in loader:
            feats.append(backbone(normalize(images)))
    feats = torch.cat(feats)
    centered = feats - feats.mean(dim=0)
    U, S, Vh = torch.linalg.svd(centered)  # LEAK: U is 60000 x 60000 floats, 13.4 GiB, inside the solver call (a peak, not a leak)
    whitened = U[:, :S.numel()] * math.sqrt(len(feats) - 1)
    print(f"whitened {tuple(whitened.shape)}, top variance share "
          f"{(S[:10].pow(2).sum() / S.pow(2).sum()).item():.3f}")


def fft_cross_correlation(volume, template):
    """Linear (not circular) cross-correlation of two 3D volumes: zero-pad to twice the
    size, multiply the spectra, transform back."""
    size = tuple(2 * d for d in volume.shape)
    spectrum = torch.fft.rfftn(volume, s=size) * torch.fft.rfftn(template, s=size).conj()
    return torch.fft.irfftn(spectrum, s=size)


@case("genuine peak")
def tomogram_template_matching_fft_padded():
    """Template matching in cryo-ET tomograms by FFT cross-correlation, one tomogram at a
    time: the two 192^3 ones pass (~1 GiB); the 384^3 one, padded to 768^3 (1.7 GiB a
    real volume, 1.7 GiB a spectrum, several at once plus cuFFT's workspace), does not."""
    torch.manual_seed(0)
    particle = torch.randn(24, 24, 24, device="cuda")
    for n in (192, 192, 384):
        tomogram = torch.randn(n, n, n, device="cuda")
        template = torch.zeros(n, n, n, device="cuda")
        template[:24, :24, :24] = particle
        score = fft_cross_correlation(tomogram, template)  # LEAK: 768^3 padded transforms for the 384^3 tomogram (a peak, not a leak)
        best = score.argmax().item()
        print(f"tomogram {n}^3: best match at {best}, score {score.max().item():.2f}")
        del score


class ESPCN(nn.Module):
    """Efficient sub-pixel super-resolution: convolutions at input resolution, then a
    pixel shuffle up by `scale`."""

    def __init__(self, scale=4, channels=64):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, channels, 5, padding=2), nn.Tanh(),
            nn.Conv2d(channels, 32, 3, padding=1), nn.Tanh(),
            nn.Conv2d(32, 3 * scale * scale, 3, padding=1))
        self.shuffle = nn.PixelShuffle(scale)

    def forward(self, x):
        return self.shuffle(self.body(x))


@case("genuine peak")
def super_resolution_full_photo_with_cudnn_benchmark():
    """An ESPCN super-resolution model, trained briefly on 64 x 64 crops with
    cudnn.benchmark on, upscales a 512 x 512 preview (fine) and then the full 4096 x 4096
    photo: the first convolution's output is 64 x 4096 x 4096 floats, 4 GiB."""
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = ESPCN().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(100):
        hr = torch.rand(32, 3, 256, 256, device="cuda")
        lr_img = F.interpolate(hr, scale_factor=0.25, mode="bicubic", align_corners=False)
        loss = F.mse_loss(model(lr_img), hr)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"trained, loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        for size in (512, 4096):
            photo = torch.rand(1, 3, size, size, device="cuda")
            upscaled = model(photo)  # LEAK: 64 x 4096 x 4096 floats (4 GiB) in the first conv for the full photo (a peak, not a leak)
            print(f"{size} -> {tuple(upscaled.shape[-2:])}")


def asian_call_payoffs(n_paths, steps=252, s0=100.0, strike=100.0, rate=0.03, vol=0.25,
                       maturity=1.0):
    """Discounted payoffs of an arithmetic-average Asian call under geometric Brownian
    motion, one row of `steps` daily increments per path."""
    dt = maturity / steps
    z = torch.randn(n_paths, steps, device="cuda")
    log_paths = torch.cumsum((rate - 0.5 * vol ** 2) * dt + vol * math.sqrt(dt) * z, dim=1)
    average = (s0 * torch.exp(log_paths)).mean(dim=1)
    return math.exp(-rate * maturity) * (average - strike).clamp_min(0)


@case("genuine peak")
def adaptive_monte_carlo_doubles_paths():
    """Prices an Asian option by Monte Carlo, doubling the number of paths until the 95%
    interval is narrower than a tolerance far too tight to reach: each round frees its
    paths before the next and nothing is kept, but each needs twice the last, until 2^21
    paths x 252 steps (2 GiB a tensor, several at once) do not fit."""
    torch.manual_seed(0)
    n, tolerance = 1 << 12, 1e-4
    while True:
        payoffs = asian_call_payoffs(n)  # LEAK: n x 252 floats several times over, n doubling each round (a peak, not a leak)
        price, half_width = payoffs.mean().item(), 1.96 * payoffs.std().item() / math.sqrt(n)
        print(f"{n} paths: price {price:.4f} +- {half_width:.4f}")
        if half_width < tolerance:
            break
        n *= 2


# ---------------------------------------------------------------------------------------
# No leaks
# ---------------------------------------------------------------------------------------

class InferenceModeGate(ConfidenceGate):
    """The confidence gate served under torch.inference_mode."""

    @torch.inference_mode()
    def __call__(self, feats):
        return super().__call__(feats)


@case("no leak")
def serving_gate_under_inference_mode():
    """The adaptive-threshold server done right: eval mode and torch.inference_mode, so
    the threshold tensor replaced at each call has no graph behind it; request batches of
    1 to 512 come and go and memory stays flat."""
    torch.manual_seed(0)
    gate = InferenceModeGate(feature_classifier().cuda())
    served = unsure = 0
    for i, feats in enumerate(feature_requests(2000, variable=True)):
        answers = gate(feats)
        served += len(answers)
        unsure += sum(1 for a in answers if a < 0)
        if i % 250 == 0:
            print(f"batch {i} served {served} unsure {unsure / served:.1%} "
                  f"threshold {gate.threshold.item():.4f}")


@case("no leak")
def embedding_extraction_into_preallocated_buffer():
    """A batch embedding job: a frozen CNN (requires_grad_(False), eval, torch.no_grad)
    embeds 20000 images into a device buffer allocated up front (20000 x 2048 floats, 156
    MiB), then each item's nearest neighbours are found chunk by chunk and moved to the
    host: large from the start, flat after."""
    torch.manual_seed(0)
    encoder = nn.Sequential(conv_bn(3, 64), conv_bn(64, 128, 2), conv_bn(128, 256, 2),
                            conv_bn(256, 512, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                            nn.Linear(512, 2048)).cuda()
    encoder.eval().requires_grad_(False)
    dataset = synthetic_images(20000, 64, 10)
    loader = DataLoader(dataset, batch_size=256, shuffle=False, num_workers=0)
    embeddings = torch.empty(len(dataset), 2048, device="cuda")
    with torch.no_grad():
        start = 0
        for images, _ in loader:
            out = F.normalize(encoder(normalize(images)), dim=-1)
            embeddings[start:start + len(out)] = out
            start += len(out)
        neighbours = []
        for chunk in embeddings.split(1024):
            neighbours.append((chunk @ embeddings.T).topk(11, dim=1).indices[:, 1:].cpu())
    neighbours = torch.cat(neighbours)
    print(f"embedded {start} images; neighbours {tuple(neighbours.shape)}")


@case("no leak")
def manual_sgd_with_momentum_buffers():
    """No optimizer object: SGD with momentum and weight decay written out under
    torch.no_grad, the momentum buffers made once and updated in place and each gradient
    dropped (p.grad = None) after its update."""
    torch.manual_seed(0)
    model = nn.Sequential(conv_bn(3, 32), conv_bn(32, 64, 2), conv_bn(64, 128, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)).cuda()
    loader = DataLoader(synthetic_images(12800, 32, 10), batch_size=128, shuffle=True,
                        num_workers=0, drop_last=True)
    params = [p for p in model.parameters() if p.requires_grad]
    buffers = [torch.zeros_like(p) for p in params]
    lr, momentum, weight_decay = 0.05, 0.9, 5e-4
    for epoch in range(8):
        for images, labels in loader:
            loss = F.cross_entropy(model(normalize(images)), labels.cuda(non_blocking=True))
            loss.backward()
            with torch.no_grad():
                for p, buf in zip(params, buffers):
                    buf.mul_(momentum).add_(p.grad.add(p, alpha=weight_decay))
                    p.sub_(buf, alpha=lr)
                    p.grad = None
        print(f"epoch {epoch} loss {loss.item():.3f}")


@case("no leak")
def greedy_generation_recomputes_prefix():
    """Sampling without a KV cache: the whole prefix goes through the model again for each
    new token (under torch.no_grad), so memory climbs within a request as the prefix grows
    from 64 to 256 tokens and drops when the next request starts: a sawtooth, with only
    the decoded tokens, on the host, kept between requests."""
    torch.manual_seed(0)
    vocab = 8192
    model = MiniGPT(vocab, block_size=1024).cuda().eval()
    for request in range(20):
        tokens = torch.randint(0, vocab, (4, 64), device="cuda")
        with torch.no_grad():
            for _ in range(192):
                logits = model(tokens)[:, -1]
                next_token = torch.multinomial(F.softmax(logits / 0.8, dim=-1), 1)
                tokens = torch.cat([tokens, next_token], dim=1)
        completions = tokens[:, 64:].cpu().tolist()
        print(f"request {request}: {len(completions)} completions of "
              f"{len(completions[0])} tokens")


@case("no leak")
def producer_thread_with_bounded_queue():
    """The GPU augmentation thread feeding a queue.Queue(maxsize=4): put() blocks while
    four batches wait, so at most four (36 MiB) are held beside the one in training; the
    producer stops after 600 batches and its None ends the loop."""
    random.seed(0)
    images, labels = device_image_set()
    producer = GpuAugmentThread(images, labels, queue.Queue(maxsize=4), batches=600)
    steps = train_from_queue(producer)
    producer.join()
    print(f"trained {steps} steps")


@case("no leak")
def ising_checkerboard_metropolis_streaming_stats():
    """A 2048 x 2048 Ising model near its critical temperature, updated by checkerboard
    Metropolis sweeps in pure tensor ops; magnetization and energy go to Python floats and
    the mean spin field into one fixed tensor, so nothing grows from sweep to sweep."""
    torch.manual_seed(0)
    n, beta, sweeps = 2048, 0.44, 3000
    spins = torch.randint(0, 2, (n, n), device="cuda").float().mul_(2).sub_(1)
    rows, cols = torch.meshgrid(torch.arange(n, device="cuda"), torch.arange(n, device="cuda"),
                                indexing="ij")
    black = (rows + cols) % 2 == 0
    mean_field = torch.zeros_like(spins)
    magnetization, energy = [], []
    for sweep in range(sweeps):
        for colour in (black, ~black):
            neighbours = (spins.roll(1, 0) + spins.roll(-1, 0)
                          + spins.roll(1, 1) + spins.roll(-1, 1))
            accept = torch.rand_like(spins) < torch.exp(-2 * beta * spins * neighbours)
            spins = torch.where(colour & accept, -spins, spins)
        mean_field += spins
        magnetization.append(spins.mean().item())
        energy.append(-(spins * (spins.roll(1, 0) + spins.roll(1, 1))).mean().item())
        if sweep % 500 == 0:
            print(f"sweep {sweep} m {magnetization[-1]:+.4f} e {energy[-1]:.4f}")
    m = torch.tensor(magnetization[sweeps // 2:])
    print(f"<|m|> {m.abs().mean().item():.4f} chi {n * n * m.var().item():.1f} "
          f"field range {(mean_field / sweeps).abs().max().item():.3f}")


if __name__ == "__main__":
    CASES.main(before_run=cap_device)
