"""Training written with a framework's trainer, not a loop of the user's own: Lightning's
Trainer and Hugging Face's Trainer run the steps, the user's code is a module's hooks or
nothing but the arguments. The leaks are the ones their forums know: a LightningModule's
step outputs kept for the epoch's end and never cleared, and Hugging Face's evaluation
keeping every batch's logits on the device (eval_accumulation_steps unset). For
diagnosis_matrix.py (`--script framework_cases.py`), capped as diagnosis_cases.py caps;
a case whose framework is not installed exits SKIPPED, saying so.

usage: framework_cases.py CASE | list
"""
import importlib.util
import sys
import tempfile

import torch

from case_registry import Cases
from diagnosis_cases import SKIPPED, cap_device, linear_layers

CASES = Cases()
case = CASES.case


def needs(module):
    if importlib.util.find_spec(module) is None:
        print(f"skipped: needs {module}, not installed here", file=sys.stderr)
        sys.exit(SKIPPED)


def host_batches(count, rows=2048, width=1024, classes=1024):
    """A DataLoader of `count` batches on the host, as a dataset on disk would give."""
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(count * rows, width),
                                          torch.randint(0, classes, (count * rows,)))
    return torch.utils.data.DataLoader(data, batch_size=rows)


def lightning_classifier(clear_each_epoch):
    """A LightningModule that keeps each step's logits for an epoch-end metric, as
    Lightning 2's guide for the removed training_epoch_end shows."""
    import lightning as L
    import torch.nn.functional as F

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = linear_layers(1024, 4)
            self.training_step_outputs = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            logits = self.net(x)  # LEAK: kept below; the list is never cleared
            self.training_step_outputs.append(logits)
            return F.cross_entropy(logits, y)

        def on_train_epoch_end(self):
            preds = torch.cat(self.training_step_outputs).argmax(1)
            self.log("train_top_class", preds.float().mean())
            if clear_each_epoch:
                self.training_step_outputs.clear()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    return Classifier()


def lightning_validated_classifier():
    """A LightningModule that keeps each validation batch's logits for an epoch-end
    metric, the clear() at the epoch's end left out."""
    import lightning as L
    import torch.nn.functional as F

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = linear_layers(1024, 4)
            self.validation_step_outputs = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            logits = self.net(x)  # LEAK: kept below; the list is never cleared
            self.validation_step_outputs.append(logits)

        def on_validation_epoch_end(self):
            preds = torch.cat(self.validation_step_outputs).argmax(1)
            self.log("val_top_class", preds.float().mean())

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    return Classifier()


def lightning_fit(module, epochs, validation_batches=0):
    import lightning as L
    trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=epochs, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, host_batches(32),
                host_batches(validation_batches) if validation_batches else None)


@case("leak", leak_in=lightning_classifier)
def lightning_step_outputs_never_cleared():
    needs("lightning")
    lightning_fit(lightning_classifier(clear_each_epoch=False), epochs=100)


@case("no leak")
def lightning_step_outputs_cleared_each_epoch():
    needs("lightning")
    lightning_fit(lightning_classifier(clear_each_epoch=True), epochs=20)


@case("leak", leak_in=lightning_validated_classifier)
def lightning_validation_outputs_never_cleared():
    needs("lightning")
    lightning_fit(lightning_validated_classifier(), epochs=100, validation_batches=16)


def small_gpt2(vocab=50257):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=256, vocab_size=vocab,
                                      n_positions=256))


def token_rows(count, length=256, vocab=50257):
    ids = torch.randint(0, vocab, (count, length))
    return [{"input_ids": r, "labels": r} for r in ids]


def hf_arguments(**kw):
    from transformers import TrainingArguments
    return TrainingArguments(output_dir=tempfile.mkdtemp(), report_to=[], save_strategy="no",
                             disable_tqdm=True, logging_steps=50, **kw)


@case("no leak")
def hf_trainer_trains():
    needs("transformers")
    from transformers import Trainer
    args = hf_arguments(per_device_train_batch_size=8, max_steps=300)
    Trainer(model=small_gpt2(), args=args, train_dataset=token_rows(512)).train()


@case("leak")
def hf_evaluation_keeps_every_batch_logits():
    """compute_metrics given and eval_accumulation_steps not: the Trainer gathers every
    evaluation batch's logits on the device, concatenated into one tensor that grows batch
    by batch. 8 x 256 x 8,192 floats (64 MiB) a batch: the cap runs out some 30 batches
    in, as an 80 GB GPU does with a 50k vocabulary after a few dozen."""
    needs("transformers")
    from transformers import Trainer
    args = hf_arguments(per_device_train_batch_size=8, per_device_eval_batch_size=8,
                        max_steps=50)
    trainer = Trainer(model=small_gpt2(8192), args=args,
                      train_dataset=token_rows(256, vocab=8192),
                      eval_dataset=token_rows(512, vocab=8192),
                      compute_metrics=lambda p: {"rows": len(p.predictions)})
    trainer.train()
    print(trainer.evaluate())  # LEAK: the evaluation loop keeps each batch's logits


@case("genuine peak")
def hf_evaluation_of_a_large_vocabulary_runs_out_at_once():
    """The same with a 50,257-token vocabulary: 412 MB of logits a batch, and the
    concatenation of five batches is the request that fails, too soon to measure growth.
    What fails is the Trainer's gathering (its fix says so), not the model."""
    needs("transformers")
    from transformers import Trainer
    args = hf_arguments(per_device_train_batch_size=8, per_device_eval_batch_size=8,
                        max_steps=20)
    trainer = Trainer(model=small_gpt2(), args=args, train_dataset=token_rows(128),
                      eval_dataset=token_rows(256),
                      compute_metrics=lambda p: {"rows": len(p.predictions)})
    trainer.train()
    print(trainer.evaluate())


@case("leak")
def torchmetrics_auroc_never_reset():
    """A 1,024-class AUROC updated every step and computed now and then, never reset: its
    list states keep every step's probabilities (the softmax it takes of the logits,
    inside torchmetrics) on the device, and each compute() concatenates them all."""
    needs("torchmetrics")
    from torchmetrics.classification import MulticlassAUROC
    from diagnosis_cases import batch, fit, model
    net, auroc = model(), MulticlassAUROC(num_classes=1024).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    for step in range(100000):
        labels = torch.randint(0, 1024, (2048,), device="cuda")
        out, _ = fit(net, opt, batch())
        auroc.update(out.detach(), labels)  # LEAK: the metric keeps both until reset()
        if step % 50 == 49:
            print(f"step {step}: auroc {auroc.compute():.3f}")


if __name__ == "__main__":
    CASES.main(before_run=cap_device)
