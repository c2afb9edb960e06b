"""Failure detection: seconds from a user's exception on one rank to the job's ``failed``.

The job is a user's script as the docs teach it (an MLP, AdamW, DDP, the elastic sampler and
State, a report per step) whose rank ``--fail-rank`` raises at step ``--fail-step``. The
script writes ``time.time()`` into a file just before it raises: the start of every figure.
One machine, one clock.

Two stacks, each ``--repeats`` times:

- ``torchrun`` (the baseline): the same script under plain ``torchrun --nproc-per-node 2``,
  no service. ``exited_s``: until torchrun exited (torch elastic noticed the failure,
  stopped the other rank and returned): the floor any scheduler on top of torch elastic
  starts from.
- ``service``: the service on SQLite and two ``interstice agent`` subprocesses
  (:class:`~interstice.agents.local_cluster.LocalCluster`), one worker each, with the
  service's ``--heartbeat-s`` (its default, 10 s, unless told: detection must not wait for a
  heartbeat). ``launcher_exited_s``: until the failing node's launcher wrote its result
  (torch elastic's end, :mod:`interstice.agents.launcher_process`); ``failed_s``: until the
  service marked the job ``failed`` (the job's ``finished_at``); ``seen_s``: until a user
  polling ``GET /v1/jobs/{id}`` every 50 ms saw it.

``--burners N`` starts N processes that spin a CPU each for the whole run (a loaded VM). Each
line carries the 1-minute load average when its repeat began. The last line per stack is its
summary: the median of each figure, and for ``service`` its ratio to the baseline's.

Usage: python bench/failure_detection.py [--repeats 3] [--burners 0] [--heartbeat-s 10]
       [--stacks torchrun,service] [--keep DIR]   (JSON lines on stdout)
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from interstice.agents.local_cluster import LocalCluster

NODES = ["f0", "f1"]
SCRIPT = '''\
"""Trains until rank FAIL_RANK raises at step FAIL_STEP, writing the time first."""

import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from interstice import elastic

RAISED_FILE, FAIL_RANK, FAIL_STEP = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


@record
def main() -> None:
    ctx = elastic.init()
    try:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(8192, 16, generator=generator)
        data = TensorDataset(x, (x.sum(1) > 0).long())
        mlp = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
        model = DistributedDataParallel(mlp)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sampler = elastic.ElasticSampler(len(data), 64, seed=0)
        state = elastic.State(
            model=model, optimizer=optimizer, sampler=sampler, total_samples=10**9
        )
        state.load()
        while not state.should_stop():
            for x_b, y_b in DataLoader(data, batch_sampler=sampler):
                optimizer.zero_grad()
                loss_sum = F.cross_entropy(model(x_b), y_b, reduction="sum")
                loss_sum.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                state.step(loss_sum=loss_sum.detach())
                elastic.report(step=state.steps, samples=state.samples, loss=state.loss)
                if ctx.rank == FAIL_RANK and state.steps == FAIL_STEP:
                    with open(RAISED_FILE, "w") as file:
                        file.write(repr(time.time()))
                    raise RuntimeError(f"rank {FAIL_RANK} fails at step {FAIL_STEP}")
                if state.should_stop():
                    break
        state.save()
    finally:
        elastic.shutdown()


main()
'''


def load_average() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


@contextmanager
def burners(count: int) -> Iterator[None]:
    """``count`` processes spinning a CPU each, until the block ends (stopped by their pids)."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
            process.wait()


def raised_at(path: Path) -> float | None:
    """The exception's time the script wrote, or None before it did."""
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        return None


def torchrun_stack(root: Path, args: argparse.Namespace, emit: Callable) -> list[dict]:
    """The script under plain torchrun (see the module docstring)."""
    rows = []
    for repeat in range(args.repeats):
        folder = root / f"torchrun-{repeat}"
        folder.mkdir(parents=True)
        raised_file = folder / "raised"
        load = load_average()
        command = [
            *(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"),
            *("--monitor-interval", "0.05", str(root / "script.py"), str(raised_file)),
            *(str(args.fail_rank), str(args.fail_step)),
        ]
        env = {**os.environ, "INTERSTICE_CHECKPOINT_DIR": str(folder), "OMP_NUM_THREADS": "1"}
        with (folder / "torchrun.log").open("wb") as log:
            subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=300)
        exited = time.time()
        start = raised_at(raised_file)
        if start is None:
            raise RuntimeError(f"the script never raised: see {folder / 'torchrun.log'}")
        row = {"repeat": repeat, "load_avg_1m": load, "exited_s": round(exited - start, 3)}
        emit("torchrun", row)
        rows.append(row)
    return rows


def service_stack(root: Path, args: argparse.Namespace, emit: Callable) -> list[dict]:
    """The script as an interstice job on two local agents (see the module docstring)."""
    cluster = LocalCluster(root / "cluster", NODES, heartbeat_s=args.heartbeat_s)
    cluster.start()
    rows = []
    try:
        cluster.node_events("idle", NODES)
        for repeat in range(args.repeats):
            cluster.wait_for(cluster.spares_ready, 120, "every spare launcher warm", 0.2)
            raised_file = root / f"service-{repeat}.raised"
            load = load_average()
            job = {
                "min_nodes": 2,
                "max_nodes": 2,
                "total_samples": 10**9,
                "global_batch_size": 64,
                "nproc_per_node": 1,
                "command": [
                    str(root / "script.py"),
                    *(str(raised_file), str(args.fail_rank), str(args.fail_step)),
                ],
            }
            job_id = cluster.request("user", "POST", "/v1/jobs", json=job)["job_id"]
            seen = watch_failed(cluster, job_id, args.timeout_s)
            start = raised_at(raised_file)
            if start is None:
                raise RuntimeError(f"the script never raised: {cluster.diagnostics()}")
            failed = datetime.fromisoformat(seen["finished_at"]).timestamp()
            results = sorted(
                path.stat().st_mtime
                for agent in cluster.agents.values()
                for path in (agent.workdir / job_id).glob("*.result.json")
            )
            row = {
                "repeat": repeat,
                "load_avg_1m": load,
                "heartbeat_s": args.heartbeat_s,
                "launcher_exited_s": round(results[0] - start, 3) if results else None,
                "failed_s": round(failed - start, 3),
                "seen_s": round(seen["seen_at"] - start, 3),
                "error": (seen.get("error") or "")[:120],
            }
            emit("service", row)
            rows.append(row)
            cluster.wait_for(lambda: not held_nodes(cluster), 60, "the nodes back in the pool")
    finally:
        cluster.close()
    return rows


def watch_failed(cluster: LocalCluster, job_id: str, timeout_s: float) -> dict[str, Any]:
    """Poll the job every 50 ms until it is ``failed``; the job, with ``seen_at``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            job = cluster.request("user", "GET", f"/v1/jobs/{job_id}")
        except httpx.HTTPError:
            job = {}
        if job.get("state") == "failed":
            return {**job, "seen_at": time.time()}
        if job.get("state") in ("finished", "cancelled"):
            raise RuntimeError(f"job {job_id} ended {job['state']}, not failed")
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} not failed in {timeout_s} s: {cluster.diagnostics()}")


def held_nodes(cluster: LocalCluster) -> list[str]:
    """Nodes some job still holds."""
    return [node["name"] for node in cluster.service_nodes() if node["holder"]]


def summary(rows: list[dict], baseline: list[dict]) -> dict:
    """The median of each figure of ``rows``; ratios to the baseline's median exit."""
    figures = [key for key in rows[0] if key.endswith("_s") and key != "heartbeat_s"]
    medians = {
        f"median_{key}": round(statistics.median(r[key] for r in rows if r[key] is not None), 3)
        for key in figures
    }
    if baseline and "median_failed_s" in medians:
        floor = statistics.median(r["exited_s"] for r in baseline)
        medians["failed_over_torchrun"] = round(medians["median_failed_s"] / floor, 2)
    return {"repeats": len(rows), **medians}


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--burners", type=int, default=0, help="CPU-spinning processes (load)")
    parser.add_argument(
        "--heartbeat-s", type=float, default=10.0, help="the service's heartbeat interval"
    )
    parser.add_argument("--stacks", default="torchrun,service", help="comma-separated")
    parser.add_argument("--fail-rank", type=int, default=1)
    parser.add_argument("--fail-step", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=120.0, help="longest wait per job")
    parser.add_argument("--keep", type=Path, help="keep logs here (default: a temporary folder)")
    args = parser.parse_args()
    machine = f"{platform.machine()} {platform.node()} ({os.cpu_count()} CPUs)"

    def emit(stack: str, row: dict) -> None:
        line = {"bench": "failure_detection", "stack": stack, "burners": args.burners}
        print(json.dumps({**line, "machine": machine, **row}), flush=True)

    with tempfile.TemporaryDirectory(prefix="interstice-bench-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        (root / "script.py").write_text(SCRIPT)
        stacks = args.stacks.split(",")
        with burners(args.burners):
            baseline = torchrun_stack(root, args, emit) if "torchrun" in stacks else []
            if baseline:
                emit("torchrun", {"summary": summary(baseline, [])})
            if "service" in stacks:
                rows = service_stack(root, args, emit)
                emit("service", {"summary": summary(rows, baseline)})


if __name__ == "__main__":
    main()
