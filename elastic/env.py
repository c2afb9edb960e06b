"""Where a training process stands: its rank, world, device and the job's folders.

:func:`init` reads the environment that ``torchrun`` (or the interstice agent's launcher)
sets, initialises ``torch.distributed`` and returns a :class:`Context`. Without any
``torchrun`` variable it runs as a world of one: it still initialises a process group
(gloo on CPU, nccl on CUDA) over an in-process ``HashStore``, so a script's collectives
(``all_reduce``, ``barrier``, DDP) work unchanged when started as plain ``python script.py``.

The ``INTERSTICE_*`` variables (names in :mod:`interstice.wire`) are set by the agent for a
job (see ``docs/reference/agent-protocol.md``);
under plain ``torchrun`` none need be set and scripts fall back to their flags.
"""

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from interstice.elastic import watchdog

from interstice import wire

DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Context:
    """One process of a training job, as :func:`init` found it.

    Attributes:
        rank: global rank, ``0 <= rank < world_size``.
        world_size: processes in this generation of the job.
        local_rank: rank on this node (picks the GPU).
        nodes: nodes in this generation (``GROUP_WORLD_SIZE``; 1 when unset).
        device: this process's device (``cuda:<local_rank>`` or ``cpu``).
        rendezvous_id: ``TORCHELASTIC_RUN_ID`` (``<job_id>-g<generation>`` under interstice).
        job_id: ``INTERSTICE_JOB_ID`` or None.
        job_dir: ``INTERSTICE_JOB_DIR`` or None (shared filesystem).
        checkpoint_dir: ``INTERSTICE_CHECKPOINT_DIR`` or None.
        run_dir: ``INTERSTICE_RUN_DIR`` or None (node-local: ``stop`` and progress files).
        total_samples: ``INTERSTICE_TOTAL_SAMPLES`` (samples, the job's budget) or None.
        global_batch_size: ``INTERSTICE_GLOBAL_BATCH_SIZE`` (samples per step) or None.
    """

    rank: int
    world_size: int
    local_rank: int
    nodes: int
    device: torch.device
    rendezvous_id: str | None
    job_id: str | None
    job_dir: Path | None
    checkpoint_dir: Path | None
    run_dir: Path | None
    total_samples: int | None
    global_batch_size: int | None


_current: Context | None = None
_state_checkpoint_dir: Path | None = None


def _path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _int(name: str) -> int | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def init(backend: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Context:
    """Initialise this training process and return where it stands.

    Picks the device from ``LOCAL_RANK`` (``cuda:<LOCAL_RANK>`` when CUDA is available, else
    CPU), sets the torch thread count from ``OMP_NUM_THREADS`` when set (forked workers
    inherit the launcher's pool size, not the variable), and initialises the default process
    group unless one exists: from the ``torchrun`` variables (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``...) when ``RANK`` is set, else as a world of one over an in-process store.
    Calling it again returns the same context.

    Args:
        backend: ``"nccl"`` or ``"gloo"``; None picks nccl on CUDA, gloo on CPU.
        timeout_s: seconds a collective may wait for its peers before it fails.

    Returns:
        The process's :class:`Context` (also what :func:`current` returns later).

    Under an interstice job (or with ``INTERSTICE_FIRST_STEP_DUMP_S`` set) it also arms a
    one-time dump of every thread's stack to stderr in case no step follows
    (:mod:`interstice.elastic.watchdog`).

    Raises:
        ValueError: an ``INTERSTICE_*`` integer variable holds no integer, or
            ``INTERSTICE_FIRST_STEP_DUMP_S`` no number of seconds >= 0.
        torch.distributed.DistStoreError: the rendezvous with the other ranks timed out.

    Example:
        >>> from interstice import elastic
        >>> ctx = elastic.init()
        >>> (ctx.rank, ctx.world_size, ctx.device.type)
        (0, 1, 'cpu')
    """
    global _current
    if _current is not None and dist.is_initialized():
        return _current
    watchdog.arm()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    timeout = datetime.timedelta(seconds=timeout_s)
    if not dist.is_initialized():
        if "RANK" in os.environ:
            dist.init_process_group(backend, timeout=timeout)
        else:
            store = dist.HashStore()
            dist.init_process_group(backend, store=store, rank=0, world_size=1, timeout=timeout)
    _current = Context(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        nodes=int(os.environ.get("GROUP_WORLD_SIZE", "1")),
        device=device,
        rendezvous_id=os.environ.get("TORCHELASTIC_RUN_ID"),
        job_id=os.environ.get(wire.ENV_JOB_ID) or None,
        job_dir=_path(wire.ENV_JOB_DIR),
        checkpoint_dir=_path(wire.ENV_CHECKPOINT_DIR),
        run_dir=_path(wire.ENV_RUN_DIR),
        total_samples=_int(wire.ENV_TOTAL_SAMPLES),
        global_batch_size=_int(wire.ENV_GLOBAL_BATCH_SIZE),
    )
    return _current


def current() -> Context:
    """The context of :func:`init`, initialising it with the defaults if needed.

    Example:
        >>> from interstice import elastic
        >>> elastic.current().world_size
        1
    """
    return _current if _current is not None and dist.is_initialized() else init()


def shutdown() -> None:
    """Destroy the process group (call it in a ``finally`` at the end of the script).

    Example:
        >>> from interstice import elastic
        >>> _ = elastic.init()
        >>> elastic.shutdown()
    """
    global _current
    if dist.is_initialized():
        dist.destroy_process_group()
    _current = None


def use_checkpoint_dir(folder: Path | None) -> None:
    """Remember the checkpoint dir a ``State`` was given (it may come from a flag)."""
    global _state_checkpoint_dir
    _state_checkpoint_dir = folder


def output_dir() -> Path | None:
    """Where the job's metrics and final model go: the job dir, else the checkpoint dir.

    The job dir is ``INTERSTICE_JOB_DIR``; without it (plain ``torchrun``) the checkpoint
    dir of the last ``State`` created with one, else ``INTERSTICE_CHECKPOINT_DIR``, else None.

    Example:
        >>> from interstice import elastic
        >>> elastic.env.output_dir() is None or elastic.env.output_dir().is_absolute()
        True
    """
    ctx = current()
    return ctx.job_dir or _state_checkpoint_dir or ctx.checkpoint_dir
