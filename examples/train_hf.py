"""A Hugging Face ``transformers.Trainer`` script on scikit-learn's digits, elastic and
exactly-once.

    torchrun --nproc-per-node 2 examples/train_hf.py --checkpoint-dir /tmp/hf
    # stop it (Ctrl-C / SIGTERM), then go on at another world size from the checkpoint:
    torchrun --nproc-per-node 3 examples/train_hf.py --checkpoint-dir /tmp/hf

The model is a ``PreTrainedModel`` built from its config (nothing is downloaded): an MLP over
the 8x8 images as 64 features. The script is a stock Trainer script but for
``ElasticTrainer`` and ``ElasticCallback`` (interstice.elastic.hf); ``--plain`` runs the
stock ``Trainer`` (its own sampler, no interstice) for comparisons. As an interstice job the
agent sets INTERSTICE_CHECKPOINT_DIR, INTERSTICE_TOTAL_SAMPLES and
INTERSTICE_GLOBAL_BATCH_SIZE, the flags' defaults. Prints one JSON line (rank 0); once the
sample budget is spent, with the held-out accuracy.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to fetch: read before transformers loads

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from interstice.elastic.hf import ElasticCallback, ElasticTrainer  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402
from transformers import (  # noqa: E402
    PretrainedConfig,
    PreTrainedModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.modeling_outputs import SequenceClassifierOutput  # noqa: E402

from interstice import elastic  # noqa: E402


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, default=env("INTERSTICE_CHECKPOINT_DIR"))
    parser.add_argument("--total-samples", type=int, default=env("INTERSTICE_TOTAL_SAMPLES", 15000))
    gbs = env("INTERSTICE_GLOBAL_BATCH_SIZE", 64)
    parser.add_argument("--global-batch-size", type=int, default=gbs, help="samples per step")
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    elastic.SampleRecorder.add_argument(parser)
    parser.add_argument("--float64", action="store_true", help="train in float64 (comparisons)")
    parser.add_argument("--plain", action="store_true", help="the stock Trainer, no interstice")
    return parser.parse_args()


class DigitsConfig(PretrainedConfig):
    model_type = "digits-mlp"

    def __init__(self, features: int = 64, hidden: int = 128, classes: int = 10, **kwargs) -> None:
        super().__init__(**kwargs)
        self.features, self.hidden, self.classes = features, hidden, classes


class DigitsMLP(PreTrainedModel):
    """Logits [N, classes] of images as features [N, features]; with labels, the loss."""

    config_class = DigitsConfig

    def __init__(self, config: DigitsConfig) -> None:
        super().__init__(config)
        self.layers = nn.Sequential(
            nn.Linear(config.features, config.hidden), nn.ReLU(),
            nn.Linear(config.hidden, config.hidden), nn.ReLU(),
            nn.Linear(config.hidden, config.classes),
        )  # fmt: skip
        self.post_init()

    def forward(self, pixels, labels=None, num_items_in_batch=None, **kwargs):
        logits = self.layers(pixels)
        loss = None
        if labels is not None:
            # The Trainer passes the labels of the whole step (all ranks, all micro-batches):
            # a sum over them is the global batch's mean whatever each rank's share.
            count = num_items_in_batch if num_items_in_batch is not None else len(labels)
            loss = F.cross_entropy(logits, labels, reduction="sum") / count
        return SequenceClassifierOutput(loss=loss, logits=logits)


class Digits(torch.utils.data.Dataset):
    """Rows ``{"pixels": [64], "labels": []}`` of images in [0, 1] and their digits."""

    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor) -> None:
        self.pixels, self.labels = pixels, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixels": self.pixels[index], "labels": self.labels[index]}


def digits() -> tuple[Digits, Digits]:
    """Train and held-out sets (80/20, the same fixed split as train_digits.py)."""
    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.get_default_dtype()) / 16
    x_train, x_test, y_train, y_test = train_test_split(
        x, torch.tensor(data.target), test_size=0.2, random_state=0
    )
    return Digits(x_train, y_train), Digits(x_test, y_test)


class Progress(TrainerCallback):
    """The job's world sizes, and with ``--record-samples`` each trained ``epoch index``."""

    def __init__(self, elastic_callback: ElasticCallback, recorder: elastic.SampleRecorder) -> None:
        self.elastic_callback = elastic_callback
        self.recorder = recorder

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        # Listed after the ElasticCallback: the checkpoint is loaded by now.
        self.elastic_callback.state.world_sizes.append(args.world_size)

    def on_optimizer_step(self, args, state, control, **kwargs) -> None:
        # The step just trained: the sampler moves at on_step_end.
        self.recorder.write(self.elastic_callback.sampler.current_share())


def accuracy(model: nn.Module, test_set: Digits) -> float:
    """The share of ``test_set``'s digits that ``model`` classifies right, in [0, 1]."""
    model.eval()
    with torch.no_grad():
        logits = model(test_set.pixels.to(model.device)).logits
    return (logits.argmax(1).cpu() == test_set.labels).float().mean().item()


@record
def main() -> None:
    args = parse_args()
    if args.float64:
        torch.set_default_dtype(torch.float64)
    try:
        train(args)
    finally:
        elastic.shutdown()  # destroy the process group, also when this rank raised


def train(args: argparse.Namespace) -> None:
    """Train from the checkpoint (if any) until a stop or the budget; print the outcome."""
    train_set, test_set = digits()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    steps = math.ceil(args.total_samples / args.global_batch_size)
    training_args = TrainingArguments(
        output_dir=str(args.checkpoint_dir or "hf-digits"),
        per_device_train_batch_size=args.global_batch_size // world_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        max_steps=steps,
        learning_rate=args.lr,
        lr_scheduler_type="cosine",
        warmup_steps=10,
        weight_decay=0.01,
        seed=args.seed,
        save_strategy="no",  # the ElasticCallback checkpoints
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),  # on CPU the Trainer distributes only when told
    )
    torch.manual_seed(args.seed)
    model = DigitsMLP(DigitsConfig())
    if args.plain:
        trainer = Trainer(model=model, args=training_args, train_dataset=train_set)
        started = time.perf_counter()
        output = trainer.train()
        train_s = time.perf_counter() - started
        if trainer.is_world_process_zero():
            print(json.dumps({
                "samples": output.global_step * args.global_batch_size, "steps": output.global_step,
                "loss": output.training_loss, "train_s": train_s,
            }))  # fmt: skip
        return
    callback = ElasticCallback(
        checkpoint_dir=args.checkpoint_dir, total_samples=args.total_samples,
        global_batch_size=args.global_batch_size, world_sizes=[],
    )  # fmt: skip
    recorder = elastic.SampleRecorder(args.record_samples, training_args.process_index)
    trainer = ElasticTrainer(
        model=model, args=training_args, train_dataset=train_set,
        callbacks=[callback, Progress(callback, recorder)],
    )  # fmt: skip
    started = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - started  # the checkpoint's load and last save included
    state = callback.state
    outcome = "finished" if state.finished else "stopped"
    # A stop is on the clock of the grace period: only a finished model is evaluated.
    held_out = {"accuracy": accuracy(model, test_set)} if state.finished else {}
    if trainer.is_world_process_zero():
        print(json.dumps({
            "samples": state.samples, "steps": state.steps, "world_sizes": state.world_sizes,
            "global_step": trainer.state.global_step, "state": outcome,
            "stop_reason": state.stop_reason, "loss": state.loss, "train_s": train_s, **held_out,
        }))  # fmt: skip


if __name__ == "__main__":
    main()
