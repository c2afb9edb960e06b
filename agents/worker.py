"""The training entry point of a job's workers: ``python -m interstice.agents.worker``.

Started by PyTorch elastic (the node agent's launcher, or ``torchrun``), which sets
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``GROUP_WORLD_SIZE`` (nodes) and the rendezvous'
store. One run is one generation: resume from the job's checkpoint, train, checkpoint, exit.

A rescale must neither lose nor repeat an optimizer step, so every rank must stop after the
same step. After each step the ranks all-reduce (max) a one-element stop flag, raised on a
rank whose agent created the run directory's ``stop`` file or that got SIGTERM; when the
reduced flag is set, every rank has finished the same step, rank 0 checkpoints it, and the
next generation resumes at the step after it. Checkpoints are also written every
``--checkpoint-every`` steps (atomic: a temporary file, then ``os.replace``).

Data: a synthetic, seeded classification task (class prototypes plus noise) whose batch at
a step depends only on (seed, step, rank), so a resumed run sees the same stream.

Legend: ``B`` batch, ``C`` channels, ``H``/``W`` image height/width.
"""

import argparse
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
from interstice.agents import rundir
from torch.distributed.elastic.multiprocessing.errors import record

CHECKPOINT_FILE = "checkpoint.pt"
CHANNELS = 3
STATUS_PERIOD_S = 0.2
EARLY_STOP_POLL_S = 0.05


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The worker's command line (built by the node agent from the job)."""
    parser = argparse.ArgumentParser(prog="python -m interstice.agents.worker")
    parser.add_argument("--model", required=True, help="a name of interstice.models")
    parser.add_argument("--parallelism", choices=["dp", "spb", "splitbrain"], default="dp")
    parser.add_argument("--spb-depth", type=int, default=0, help="SPB depth (spb only)")
    parser.add_argument("--batch-size", type=int, required=True, help="samples per worker-step")
    parser.add_argument("--total-samples", type=int, required=True, help="train this many")
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--run-dir", type=Path, required=True, help="shared with the agent")
    parser.add_argument("--node", default=os.uname().nodename, help="names the step log")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps")
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--image-size", type=int, default=32, help="pixels per side")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


class StopFlag:
    """This rank's wish to stop: the agent's stop file exists, or SIGTERM arrived.

    Before its first step a worker holds no progress of its generation (every step
    all-reduces across all ranks, so no rank can have finished one without it), so a stop
    requested then (a newer rescale replaced this rendezvous) ends the process at once,
    even while it waits in ``init_process_group`` for peers that will never come.
    """

    def __init__(self, run_dir: Path) -> None:
        self._stop_file = run_dir / rundir.STOP_FILE
        self._signalled = False
        self._training = threading.Event()
        signal.signal(signal.SIGTERM, self._on_signal)
        threading.Thread(target=self._exit_if_stopped_early, daemon=True).start()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signalled = True

    def _exit_if_stopped_early(self) -> None:
        while not self._training.wait(EARLY_STOP_POLL_S):
            if self.raised():
                os._exit(0)  # nothing to checkpoint; a blocked collective cannot be left

    def training_started(self) -> None:
        """From now on a stop is agreed between ranks and checkpointed."""
        self._training.set()

    def raised(self) -> bool:
        """Whether this rank wants the job to stop after the current step."""
        return self._signalled or self._stop_file.exists()


class SyntheticData:
    """Seeded images of ``num_classes`` noisy class prototypes.

    Args:
        num_classes: number of classes.
        image_size: pixels per side.
        seed: fixes the prototypes and every batch.
    """

    def __init__(self, num_classes: int, image_size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.prototypes_KCHW = torch.randn(
            num_classes, CHANNELS, image_size, image_size, generator=generator
        )
        self.seed = seed

    def batch(self, step: int, rank: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch of ``rank`` at optimizer ``step``: inputs ``x_BCHW`` and targets ``y_B``."""
        generator = torch.Generator().manual_seed(hash((self.seed, step, rank)) & 0x7FFFFFFF)
        y_B = torch.randint(len(self.prototypes_KCHW), (batch_size,), generator=generator)
        noise_BCHW = torch.randn((batch_size, *self.prototypes_KCHW.shape[1:]), generator=generator)
        return self.prototypes_KCHW[y_B] + 0.5 * noise_BCHW, y_B


def load_checkpoint(checkpoint_dir: Path) -> dict[str, Any] | None:
    """The job's last checkpoint, or None before the first."""
    path = checkpoint_dir / CHECKPOINT_FILE
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


def save_checkpoint(checkpoint_dir: Path, state: dict[str, Any]) -> None:
    """Write the checkpoint atomically (a reader sees the old one or the new one, whole)."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    tmp_path = checkpoint_dir / f".{CHECKPOINT_FILE}.{os.getpid()}.tmp"
    torch.save(state, tmp_path)
    os.replace(tmp_path, checkpoint_dir / CHECKPOINT_FILE)


class Reporter:
    """Writes what this worker did for its agent: the status file and the step log."""

    def __init__(self, args: argparse.Namespace, rank: int, local_rank: int) -> None:
        args.run_dir.mkdir(parents=True, exist_ok=True)
        self.status_path = rundir.status_path(args.run_dir, local_rank)
        self.steps_log = rundir.steps_path(args.run_dir, args.node, local_rank).open("a")
        self.common = {
            "job_id": os.environ.get("INTERSTICE_JOB_ID", args.run_dir.name),
            "rendezvous_id": os.environ.get("TORCHELASTIC_RUN_ID"),
            "rank": rank,
            "world_size": dist.get_world_size(),
            "nodes": int(os.environ.get("GROUP_WORLD_SIZE", dist.get_world_size())),
            "backend": dist.get_backend(),
            "pid": os.getpid(),
        }
        self._status_written_at = 0.0

    def status(self, state: str, step: int, samples_done: int, samples_per_s: float | None):
        """Write the status file (at most every ``STATUS_PERIOD_S`` while running)."""
        now = time.monotonic()
        if state == "running" and now - self._status_written_at < STATUS_PERIOD_S:
            return
        self._status_written_at = now
        rundir.write_json_atomic(
            self.status_path,
            {
                **self.common,
                "state": state,
                "step": step,
                "samples_done": samples_done,
                "samples_per_s": samples_per_s,
                "time": time.time(),
            },
        )

    def log(self, event: str, step: int, **extra: Any) -> None:
        """Append one line to the step log."""
        line = {"event": event, "step": step, **self.common, "time": time.time(), **extra}
        self.steps_log.write(rundir.json_line(line))
        self.steps_log.flush()

    def close(self) -> None:
        """Close the step log."""
        self.steps_log.close()


def train(args: argparse.Namespace, stop_flag: StopFlag, device: torch.device) -> str:
    """Resume the job from its checkpoint and train until done or asked to stop.

    Returns:
        ``"finished"`` (``total_samples`` reached) or ``"stopped"`` (checkpointed on request).
    """
    from interstice.models import build_trainer

    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    trainer = build_trainer(
        args.model,
        args.parallelism,
        args.spb_depth,
        num_classes=args.num_classes,
        image_size=args.image_size,
        lr=args.lr,
        device=str(device),
    )
    checkpoint = load_checkpoint(args.checkpoint_dir)
    step, samples_done = 0, 0
    if checkpoint is not None:
        trainer.load_state_dict(checkpoint["trainer"])
        step, samples_done = checkpoint["step"], checkpoint["samples_done"]
    data = SyntheticData(args.num_classes, args.image_size, args.seed)
    reporter = Reporter(args, rank, local_rank)
    reporter.status("running", step, samples_done, None)
    reporter.log("resume", step)
    stop_flag.training_started()
    samples_per_step = args.batch_size * world_size
    stop_F = torch.zeros(1, device=device)
    samples_per_s = None
    outcome = "finished"
    try:
        while samples_done < args.total_samples:
            started = time.perf_counter()
            x_BCHW, y_B = data.batch(step + 1, rank, args.batch_size)
            loss = trainer.step(x_BCHW.to(device), y_B.to(device))
            step += 1
            samples_done += samples_per_step
            stop_F.fill_(float(stop_flag.raised()))
            dist.all_reduce(stop_F, op=dist.ReduceOp.MAX)
            stop = bool(stop_F.item())
            rate = samples_per_step / (time.perf_counter() - started)
            samples_per_s = rate if samples_per_s is None else 0.8 * samples_per_s + 0.2 * rate
            reporter.log("step", step, loss=loss)
            reporter.status("running", step, samples_done, samples_per_s)
            if stop and samples_done < args.total_samples:
                outcome = "stopped"
                break
            if step % args.checkpoint_every == 0 and rank == 0:
                save_checkpoint(args.checkpoint_dir, _state(trainer, step, samples_done))
        if rank == 0:
            save_checkpoint(args.checkpoint_dir, _state(trainer, step, samples_done))
        dist.barrier()  # nobody exits (and no new generation resumes) before the checkpoint
        reporter.log("exit", step, outcome=outcome)
        reporter.status(outcome, step, samples_done, samples_per_s)
    finally:
        reporter.close()
    return outcome


def _state(trainer: Any, step: int, samples_done: int) -> dict[str, Any]:
    return {"step": step, "samples_done": samples_done, "trainer": trainer.state_dict()}


@record
def main(argv: list[str] | None = None) -> None:
    """Run one generation of the job's training on this rank (build, run, close).

    Args:
        argv: the worker's arguments (see :func:`parse_args`); None reads ``sys.argv``.
    """
    args = parse_args(argv)
    stop_flag = StopFlag(args.run_dir)
    if "OMP_NUM_THREADS" in os.environ:
        # Forked workers inherit the launcher's thread pool size, not this variable's.
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    try:
        train(args, stop_flag, device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
