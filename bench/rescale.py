"""Rescale latency of the node agents: from a rescale command to the first step at the new
world size, up and down, with 4 local nodes on CPU/gloo.

Drives the full stack on this machine (``interstice.agents.local_cluster``): the service on
SQLite and 4 ``interstice agent`` subprocesses, each a node of its own; node events
(``idle``, or ``busy`` with a grace period: a reclaim) make the service rescale the job.
Times come from two clocks of one machine: the command's time is the rescale the service
recorded (``job.rescales[-1].at``, when it wrote the commands), the end is the latest
``step`` log line of the first step at the new world size, over every rank. Also printed:
``exit_s`` (old workers checkpointed and gone), ``resume_s`` (new workers rendezvoused and
loaded the checkpoint). Before each measured rescale the cluster settles ``--settle-s`` so
each agent's spare launcher (torch imported ahead) is ready.

BFTrainer (Horovod on Summit) reports 18 s up and 12 s down; the goal here is <= 5 s.

Usage: python bench/rescale.py [--repeats 2] [--settle-s 15]   (JSON lines on stdout)
"""

import argparse
import json
import platform
import tempfile
import time
from datetime import datetime
from pathlib import Path

from interstice.agents.local_cluster import LocalCluster

NODES = ["n0", "n1", "n2", "n3"]
SCALABILITY_CSV = "model,nodes,samples_per_s\n" + "".join(
    f"tinycnn,{nodes},{100.0 * nodes}\n" for nodes in range(5)
)


def measure(cluster: LocalCluster, job_id: str, world_size: int, generation: int) -> dict:
    """Wait for ``generation`` of the job at ``world_size``; the rescale's timings."""
    job = cluster.wait_for(
        lambda: (
            (j := cluster.request("user", "GET", f"/v1/jobs/{job_id}"))["generation"] >= generation
            and j
        ),
        60,
        f"generation {generation}",
    )
    commanded = datetime.fromisoformat(job["rescales"][-1]["at"]).timestamp()

    def first_steps() -> list[dict]:
        records = cluster.worker_records(job_id)
        new = [r for r in records if r["time"] >= commanded and r["world_size"] == world_size]
        steps = [r for r in new if r["event"] == "step"]
        ranks = {r["rank"] for r in steps}
        return new if len(ranks) == world_size else []

    new = cluster.wait_for(first_steps, 90, f"first step at world size {world_size}")
    old_exits = [
        r["time"]
        for r in cluster.worker_records(job_id)
        if r["event"] == "exit" and r["time"] >= commanded
    ]
    first_step = min(r["step"] for r in new if r["event"] == "step")
    step_done = max(r["time"] for r in new if r["event"] == "step" and r["step"] == first_step)
    return {
        "from_world_size": len(job["rescales"][-1]["from_nodes"]),
        "world_size": world_size,
        "exit_s": round(max(old_exits) - commanded, 3) if old_exits else None,
        "resume_s": round(max(r["time"] for r in new if r["event"] == "resume") - commanded, 3),
        "first_step_s": round(step_done - commanded, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="up/down pairs to time")
    parser.add_argument("--settle-s", type=float, default=15.0, help="wait before a rescale")
    parser.add_argument("--keep", type=Path, help="keep logs here (default: a temporary folder)")
    args = parser.parse_args()
    machine = f"{platform.machine()} {platform.node()}"
    with tempfile.TemporaryDirectory(prefix="interstice-bench-") as tmp:
        cluster = LocalCluster(
            args.keep or Path(tmp), NODES, heartbeat_s=1.0, scalability_csv=SCALABILITY_CSV
        )
        cluster.start()
        try:
            cluster.node_events("idle", NODES[:2])
            job = cluster.request(
                "user",
                "POST",
                "/v1/jobs",
                json={
                    "model": "tinycnn",
                    "min_nodes": 1,
                    "max_nodes": 4,
                    "total_samples": 1e8,
                    "batch_size": 8,
                },
            )
            job_id, generation = job["job_id"], 1
            result = measure(cluster, job_id, 2, generation)
            print(json.dumps({"bench": "rescale", "kind": "start", "machine": machine, **result}))
            for _ in range(args.repeats):
                time.sleep(args.settle_s)
                generation += 1
                cluster.node_events("idle", NODES[2:])
                result = measure(cluster, job_id, 4, generation)
                print(json.dumps({"bench": "rescale", "kind": "up", "machine": machine, **result}))
                time.sleep(args.settle_s)
                generation += 1
                cluster.node_events("busy", NODES[2:], grace_s=10.0)
                result = measure(cluster, job_id, 2, generation)
                print(
                    json.dumps({"bench": "rescale", "kind": "down", "machine": machine, **result})
                )
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
