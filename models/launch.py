"""Run a function in W processes on this machine, one torch.distributed rank each.

The profiler, the benchmarks and the tests simulate a job of W nodes with W local processes.
Processes come from ``torch.multiprocessing.start_processes`` (spawn); the rendezvous is
torch.distributed's TCP store on a free local port. Each rank's return value is serialised
with ``torch.save`` and sent back through a multiprocessing queue.
"""

import atexit
import io
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from interstice.ports import free_port


def _entry(
    rank: int,
    fn: Callable[..., Any],
    world_size: int,
    port: int,
    backend: str,
    threads: int,
    timeout_s: float,
    results: Any,
    args: tuple,
) -> None:
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    try:
        value = fn(rank, world_size, *args)
        buffer = io.BytesIO()
        torch.save(value, buffer)
        results.put((rank, buffer.getvalue()))
        dist.barrier()  # no rank tears gloo down while a peer still talks to it
    finally:
        dist.destroy_process_group()
    # The result is sent: run the atexit handlers, then leave without the interpreter's
    # teardown. Objects of ``fn`` still alive there (a DDP reducer in a reference cycle) hold
    # gloo's threads; destroying them then is the likely cause (not proven) of the SIGABRT
    # ("terminate called without an active exception") that ended a rank of CI's
    # test_splitbrain and test_profile now and then, the barrier above notwithstanding.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_group(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple = (),
    *,
    backend: str = "gloo",
    threads_per_rank: int = 1,
    timeout_s: float = 300.0,
) -> list[Any]:
    """Call ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes.

    Args:
        fn: a module-level function (it is pickled by name); the process group is initialised
            before it runs and destroyed after.
        world_size: processes, W >= 1.
        args: further picklable arguments.
        backend: ``gloo`` (CPU) or ``nccl`` (one GPU per rank).
        threads_per_rank: torch intra-op threads per process.
        timeout_s: torch.distributed collective timeout, seconds.

    Returns:
        Each rank's return value, rank order.

    Raises:
        torch.multiprocessing.ProcessRaisedException: a rank raised (its traceback included).
    """
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    context = mp.start_processes(
        _entry,
        args=(fn, world_size, free_port(), backend, threads_per_rank, timeout_s, results, args),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    values: dict[int, Any] = {}
    finished = False
    while not finished:
        # Drain while waiting: a large result would otherwise block its sender on a full pipe.
        finished = context.join(timeout=0.1)
        while not results.empty():
            rank, payload = results.get()
            values[rank] = torch.load(io.BytesIO(payload), weights_only=False)
    return [values[r] for r in range(world_size)]
