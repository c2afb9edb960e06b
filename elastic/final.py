"""The trained model, where the job's owner finds it: ``<job_dir>/final/model.pt``."""

import logging
from pathlib import Path

import torch
import torch.distributed as dist
from interstice.elastic import env, sharded
from interstice.elastic.state import is_sharded, unwrap, write_torch

from interstice import wire

logger = logging.getLogger(__name__)


def save_final(model: torch.nn.Module, path: str | Path | None = None) -> Path | None:
    """Write the trained model's state dict (rank 0, atomically); call it on every rank.

    The file holds ``unwrap(model).state_dict()`` (no DDP ``module.`` prefix; a sharded
    model's slices joined whole, see :func:`interstice.elastic.sharded.full_state_dict`), so
    ``Net().load_state_dict(torch.load(path))`` restores it into the unsharded model. Every
    rank waits until it is written.

    Args:
        model: the trained model (DDP-wrapped or not, replicated or sharded).
        path: destination file; None: ``<job_dir>/final/model.pt``, or, without a job dir
            (plain ``torchrun``), ``<checkpoint_dir>/final/model.pt`` (the State's checkpoint
            dir; see :func:`interstice.elastic.env.output_dir`).

    Returns:
        The file written (the same path on every rank); None when ``path`` is None and there
        is neither a job dir nor a checkpoint dir (a warning is logged, nothing written).

    Raises:
        OSError: the file cannot be written (rank 0).

    Example:
        >>> import tempfile, pathlib, torch
        >>> from interstice import elastic
        >>> _ = elastic.init()
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "model.pt"
        >>> elastic.save_final(torch.nn.Linear(2, 2), target) == target
        True
    """
    ctx = env.current()
    if path is None:
        base = env.output_dir()
        if base is None:
            logger.warning("final model not saved: no path, no job dir, no checkpoint dir")
            return None
        path = wire.final_dir(base) / wire.FINAL_MODEL_FILE
    path = Path(path)
    model = unwrap(model)
    state = sharded.full_state_dict(model) if is_sharded(model) else model.state_dict()
    if ctx.rank == 0:
        write_torch(path, state)
    if dist.is_initialized():
        dist.barrier()
    return path
