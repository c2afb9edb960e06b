"""Rescale latency of the node agents: from a rescale command to the first step at the new
world size, up and down.

Two ways to drive 4 local nodes (``--stack``):

- ``service`` (default, CPU/gloo): the full stack of ``interstice.agents.local_cluster``:
  the service on SQLite and 4 ``interstice agent`` subprocesses; node events (``idle``, or
  ``busy`` with a grace period: a reclaim) make the service rescale the job. The command's
  time is the rescale the service recorded (``job.rescales[-1].at``, when it wrote the
  commands), so the time includes command delivery. Its first row, ``first_start``, is the
  job's first start on freshly started agents, as on a node a Slurm placeholder just filled:
  the agents are started, the bench waits until the service shows all of them registered
  (``registered_s``: from the first agent's start), makes two nodes idle and submits the job;
  ``first_step_s`` runs from the submission to the first step (``command_s``: from the
  service's start command), with no wait for the spare launchers (``--repeats 0``: this row
  only).
- ``launcher``: no service; the agents' launchers (``interstice.agents.launcher``) driven
  directly, as each agent would on a command: end the old generation, launch the new one.
  The command's time is when the bench "sends" it. With ``--world-sizes 1,1`` this times a
  restart (new rendezvous, checkpoint, resume) of one node, e.g. on one GPU with nccl.

The job runs the built-in worker (``tinycnn``), or with ``--script PATH`` a user's script as
the job's ``command`` (e.g. ``examples/train_digits.py``; it must call ``elastic.report``
every step). The end is the first step at the new world size: the first line of the job's
``metrics.jsonl`` (rank 0's ``elastic.report``, whose first report in a process is written at
once; rank 0 ends a step only after every rank's gradients were all-reduced) with the new
world size, written after the command (launcher stack: after the old workers exited, so a
restart at the same size is told apart). One machine, one clock. Before each timed rescale
the bench waits (at most ``--settle-s``) until each node's spare launcher (torch imported
ahead) is ready: on a loaded 2-core machine the imports take 5-20 s, and a rescale that has
to wait for them measures the import, not the rescale (the first start does not wait: how
long it takes on fresh agents is what it measures).

The service stack's rescales are the optimizer's decisions: it learns each job's rates from
what the job reports, so a job that trained slower at 4 nodes than at 3 (four processes on a
2-core machine) is not grown to 4 again. Such a step prints a line with ``not_planned`` (why)
instead of ``first_step_s`` and ends the sequence; ``--stack launcher`` has no optimizer.

BFTrainer (Horovod on Summit) reports 18 s up and 12 s down; the goal here is <= 5 s.

Usage: python bench/rescale.py [--stack service|launcher] [--repeats 2|0] [--settle-s 20]
       [--plan-timeout-s 60] [--world-sizes 2,4,3] [--script examples/train_digits.py]
       (JSON lines on stdout)
"""

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
from interstice.agents.generation import Generation
from interstice.agents.launch_config import NodeSettings
from interstice.agents.launcher import Launcher
from interstice.agents.local_cluster import LocalCluster, free_ports
from interstice.agents.protocol import parse_command
from interstice.agents.stopping import end_generation, kill

from interstice import wire

NODES = ["n0", "n1", "n2", "n3"]
SCALABILITY_CSV = "model,nodes,samples_per_s\n" + "".join(
    f"tinycnn,{nodes},{100.0 * nodes}\n" for nodes in range(5)
)


def job_spec(script: Path | None) -> dict:
    """The job: the built-in worker on tinycnn, or ``script`` as the job's command."""
    job = {
        "model": "tinycnn",  # the table's linear curve: the optimizer gives it every idle node
        "min_nodes": 1,
        "max_nodes": 4,
        "total_samples": 10**8,
        "global_batch_size": 32,
    }
    if script is not None:
        job["command"] = [str(script.resolve())]
    return job


def first_step_s(job_dir: Path, commanded: float, world_size: int, after: float) -> float | None:
    """Seconds from ``commanded`` to the first step at ``world_size`` written after ``after``
    (see the module docstring), or None before there is one."""
    try:
        text = wire.metrics_path(job_dir).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written
        if record.get("world_size") == world_size and record["time"] >= after:
            return round(record["time"] - commanded, 3)
    return None


def settle(ready, limit_s: float) -> None:
    """Wait until ``ready()`` (every spare launcher warm), at most ``limit_s``, plus 1 s."""
    deadline = time.monotonic() + limit_s
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)


def service_stack(root: Path, args: argparse.Namespace, emit) -> None:
    """Rescales made by the service from node events (see the module docstring)."""
    cluster = LocalCluster(root, NODES, heartbeat_s=1.0, scalability_csv=SCALABILITY_CSV)
    cluster.start()  # returns once every agent registered
    try:

        def read_job() -> dict | None:
            try:
                return cluster.request("user", "GET", f"/v1/jobs/{job_id}")
            except httpx.HTTPStatusError:  # a busy SQLite may answer 500 now and then
                return None

        def measure(world_size: int, since: float | None = None) -> dict | None:
            # The service's plan reaching ``world_size`` (a batch of events may take two
            # rescales): its last rescale is the command timed, or ``since`` when given.
            # None: the service did not plan it (see the module docstring).
            try:
                job = cluster.wait_for(
                    lambda: (j := read_job()) is not None and j["world_size"] == world_size and j,
                    args.plan_timeout_s,
                    f"the service planning world size {world_size}",
                )
            except TimeoutError:
                return None
            commanded = datetime.fromisoformat(job["rescales"][-1]["at"]).timestamp()
            start = commanded if since is None else since
            seconds = cluster.wait_for(
                lambda: first_step_s(Path(job["job_dir"]), start, world_size, start),
                120,
                f"first step at world size {world_size}",
            )
            return {
                "from_world_size": len(job["rescales"][-1]["from_nodes"]),
                "world_size": world_size,
                "first_step_s": seconds,
                **({} if since is None else {"command_s": round(seconds + start - commanded, 3)}),
            }

        def step(kind: str, state: str, nodes: list[str], world_size: int) -> bool:
            settle(cluster.spares_ready, args.settle_s)
            cluster.node_events(state, nodes, grace_s=10.0 if state == "busy" else 0.0)
            result = measure(world_size)
            if result is None:
                planned = (read_job() or {}).get("world_size")
                emit(kind, {
                    "world_size": world_size,
                    "not_planned": f"the service kept world size {planned} for "
                    f"{args.plan_timeout_s:g} s (the job's own reported rates say it does not "
                    "gain from it on this machine); the sequence ends here",
                })  # fmt: skip
                return False
            emit(kind, result)
            return True

        # The first start on fresh agents: registered, then two idle nodes and the job.
        agents_started = min(agent.started_at for agent in cluster.agents.values())
        registered_s = round(time.time() - agents_started, 3)
        cluster.node_events("idle", NODES[:2])
        submitted = time.time()
        job_id = cluster.request("user", "POST", "/v1/jobs", json=job_spec(args.script))["job_id"]
        started = measure(2, since=submitted)
        if started is None:
            raise TimeoutError(f"the service did not start the job: {cluster.diagnostics()}")
        emit("first_start", {"registered_s": registered_s, **started})
        sequence = [
            ("up", "idle", NODES[2:], 4),
            ("down", "busy", NODES[3:], 3),
            ("up", "idle", NODES[3:], 4),
            ("down", "busy", NODES[2:], 2),
        ]
        for _ in range(args.repeats):
            if not all(step(*rescale) for rescale in sequence):
                break
    finally:
        cluster.close()


def launcher_stack(root: Path, args: argparse.Namespace, emit) -> None:
    """Rescales made by driving each node's launcher directly (see the module docstring)."""
    # Several nodes share this machine's cores: one thread per worker, or they thrash.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    world_sizes = [int(size) for size in args.world_sizes.split(",")]
    nodes = NODES[: max(world_sizes)]
    launchers = {
        node: Launcher(NodeSettings(root / node, node, "127.0.0.1", free_ports(2)))
        for node in nodes
    }
    running: dict[str, Generation] = {}
    job_id = "j-bench"
    job_dir = wire.job_dir(root, job_id)
    job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # as the service does at submission
    job = {
        **job_spec(args.script),
        "job_dir": str(job_dir),
        "checkpoint_dir": str(wire.checkpoint_dir(job_dir)),
    }
    try:
        for launcher_ in launchers.values():
            launcher_.warm()
        previous = 0
        for generation, world_size in enumerate(world_sizes * args.repeats, start=1):
            settle(lambda: all(lch.spare_ready() for lch in launchers.values()), args.settle_s)
            members = nodes[:world_size]
            endpoint = f"127.0.0.1:{launchers[members[0]].settings.ports[generation % 2]}"
            commanded = time.time()
            ended: list[float] = [commanded]

            def act(
                node: str,
                generation: int = generation,
                world_size: int = world_size,
                members: list[str] = members,
                endpoint: str = endpoint,
                ended: list[float] = ended,
            ) -> None:
                # One agent's part of a rescale: end the old generation, launch the new one.
                old = running.pop(node, None)
                if old is not None:
                    end_generation(old, time.monotonic() + 30.0)
                    ended.append(time.time())
                if node in members:
                    command = parse_command(
                        {
                            "command_id": generation,
                            "kind": "rescale",
                            "job_id": job_id,
                            "world_size": world_size,
                            "rendezvous_endpoint": endpoint,
                            "rendezvous_id": f"{job_id}-g{generation}",
                            "job": job,
                        }
                    )
                    running[node] = launchers[node].launch(command)

            threads = [threading.Thread(target=act, args=(node,)) for node in nodes]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

            deadline = time.monotonic() + 120
            while (seconds := first_step_s(job_dir, commanded, world_size, max(ended))) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no step at world size {world_size} in 120 s")
                time.sleep(0.05)
            kind = "start" if previous == 0 else "up" if world_size > previous else "down"
            if world_size == previous:
                kind = "restart"
            result = {"world_size": world_size, "first_step_s": seconds}
            emit(kind, {"from_world_size": previous, **result})
            previous = world_size
            for node in members:
                launchers[node].warm()  # the next spare, as the agent does after its ack
    finally:
        for generation_ in running.values():
            kill(generation_.process)
        for launcher_ in launchers.values():
            launcher_.close_spare()


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--stack", choices=["service", "launcher"], default="service")
    parser.add_argument(
        "--repeats", type=int, default=1, help="times the sequence is run (0: the first start only)"
    )
    parser.add_argument(
        "--settle-s", type=float, default=60.0, help="longest wait for the spares before a rescale"
    )
    parser.add_argument(
        "--world-sizes", default="2,4,3,4,2", help="launcher stack: the sequence of world sizes"
    )
    parser.add_argument(
        "--script", type=Path, help="a user's script as the job's command (default: built-in)"
    )
    parser.add_argument(
        "--plan-timeout-s",
        type=float,
        default=60.0,
        help="service stack: longest wait for the service to plan a world size",
    )
    parser.add_argument("--keep", type=Path, help="keep logs here (default: a temporary folder)")
    args = parser.parse_args()
    machine = f"{platform.machine()} {platform.node()}"

    def emit(kind: str, result: dict) -> None:
        line = {"bench": "rescale", "stack": args.stack, "kind": kind, "machine": machine}
        line["job"] = str(args.script) if args.script else "built-in worker (tinycnn)"
        print(json.dumps({**line, **result}), flush=True)

    with tempfile.TemporaryDirectory(prefix="interstice-bench-") as tmp:
        root = args.keep or Path(tmp)
        (service_stack if args.stack == "service" else launcher_stack)(root, args, emit)


if __name__ == "__main__":
    main()
