"""Shared by the elastic tests: the exactly-once check, torchrun launches, stops and kills."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from exactly_once import coverage_problems, read_records  # noqa: F401 (imported from here)
from polling import wait_until

from interstice.ports import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def worker_env(**extra: str) -> dict[str, str]:
    """A clean environment for example runs: one thread per process, no INTERSTICE_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERSTICE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    return env


def torchrun(
    nproc: int,
    script: str,
    *args: str,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
):
    """Start ``examples/<script>`` under ``torchrun`` (c10d rendezvous on a free local port),
    under ``prefix`` when given (e.g. ``("timeout", "-s", "TERM", "600")``)."""
    command = [
        *prefix, sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
        str(EXAMPLES / script), *args,
    ]  # fmt: skip
    return subprocess.Popen(
        command, env=env or worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def result_of(process: subprocess.Popen, timeout_s: float = 180) -> dict:
    """The JSON line an example printed (rank 0), after the process ended."""
    stdout, stderr = process.communicate(timeout=timeout_s)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result line (exit {process.returncode}):\n{stdout}\n{stderr[-3000:]}"
    return json.loads(lines[-1])


def assert_same_models(path: Path, reference: Path, **tolerance: float) -> None:
    """The state dicts saved at ``path`` and ``reference`` hold the same tensors, within
    ``tolerance`` (``torch.testing.assert_close``'s ``rtol``/``atol``)."""
    import torch  # the helpers above run without torch

    saved, expected = torch.load(path), torch.load(reference)
    assert saved.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(
            saved[name], tensor, **tolerance, msg=lambda message, name=name: f"{name}: {message}"
        )


def stopped_run(
    run: subprocess.Popen, records: Path, trained: int, samples: int, timeout_s: float = 180
) -> dict:
    """SIGTERM to ``run`` once ``records`` hold ``samples`` beyond the ``trained`` before it
    (to GNU ``timeout``, which relays it to torchrun, then to its group), and its result
    line: checked to be a stop on the signal that trained more and recorded what it counts."""
    wait_until(
        lambda: len(read_records(records)) >= trained + samples,
        timeout_s,
        f"{samples} more samples recorded",
        running=lambda: run.poll() is None,
    )
    run.terminate()
    result = result_of(run, timeout_s)
    assert result["state"] == "stopped" and result["stop_reason"] == "signal", result
    assert result["samples"] == len(read_records(records)) > trained, result
    return result


def kill_before_first_checkpoint(
    run: subprocess.Popen,
    nproc: int,
    records: Path,
    checkpoint_dir: Path,
    samples: int,
    timeout_s: float = 180,
) -> None:
    """SIGKILL to ``run`` (torchrun) and its ``nproc`` workers once their ``records`` hold
    ``samples``, well before a timed save: no checkpoint is left. Their records are then
    deleted, as what a killed run trained is lost and trained again by the next run."""
    wait_until(
        lambda: len(list(records.glob("*.txt"))) == nproc and len(read_records(records)) >= samples,
        timeout_s,
        f"{samples} samples recorded by {nproc} workers",
        running=lambda: run.poll() is None,
    )
    run.kill()  # torchrun, then its workers (in sessions of their own): their record files
    for path in records.glob("*.txt"):  # are named rank<R>-pid<PID>.txt
        os.kill(int(path.stem.split("-pid")[1]), signal.SIGKILL)
    run.communicate(timeout=timeout_s)
    assert not (checkpoint_dir / "checkpoint.pt").exists()
    for path in records.glob("*.txt"):
        path.unlink()


def python_run(script: str, *args: str) -> subprocess.Popen:
    """Start ``python examples/<script> ARGS``: world size 1, no torchrun."""
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), *args],
        env=worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def job_cluster(root: Path):
    """A started local service with agents on nodes n0 and n1 (a
    :class:`~interstice.agents.local_cluster.LocalCluster`, to close), for
    :func:`grow_and_shrink_job`; several jobs may run on it, one after the other."""
    from interstice.agents.local_cluster import LocalCluster
    from local_jobs import start_cluster

    return start_cluster(LocalCluster(root, ["n0", "n1"], heartbeat_s=1.0, grace_s=10.0))


def grow_and_shrink_job(cluster, toml: str, total_samples: int, timeout_s: float) -> dict:
    """``interstice job submit examples/<toml>`` on ``cluster`` (:func:`job_cluster`): n0
    idle -> world size 1; n1 idle -> it grows to 2; n1 reclaimed -> it shrinks to 1 and
    trains to the budget, ``total_samples``. World sizes are judged from what the workers
    reported (the metrics series). Checks that the job finished with its checkpoint, final
    model, metrics and a log per generation where the docs say; returns rank 0's last JSON
    log line (the example's result)."""
    from local_jobs import job_cli, last_json_line, reported_world_sizes

    from interstice import wire

    def reported(sizes: list[int]) -> None:
        cluster.wait_for(
            lambda: reported_world_sizes(cluster, job_id)[-len(sizes) :] == sizes,
            timeout_s,
            f"world sizes {sizes} reported",
            period_s=0.2,
        )

    cluster.node_events("idle", ["n0"])
    submitted = job_cli(cluster, "submit", str(EXAMPLES / toml), "--total-samples",
                        str(total_samples))  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.split()[-1]
    reported([1])
    cluster.node_events("idle", ["n1"])
    reported([1, 2])
    cluster.node_events("busy", ["n1"], grace_s=8.0)
    waited = job_cli(cluster, "wait", job_id, "--timeout-s", str(int(timeout_s)),
                     "--period-s", "0.5")  # fmt: skip
    assert waited.exit_code == 0, (waited.output, cluster.diagnostics())
    job = json.loads(job_cli(cluster, "show", job_id, "--json").stdout)
    metrics = cluster.request("user", "GET", f"/v1/jobs/{job_id}/metrics")["data"]
    log = job_cli(cluster, "logs", job_id, "--rank", "0", "--tail", "20")

    assert job["state"] == "finished" and job["samples_done"] >= total_samples, job
    sizes = [p["world_size"] for p in metrics if p["world_size"]]
    merged = [s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s]
    assert merged == [1, 2, 1], merged
    samples = [p["samples"] for p in metrics]
    assert samples == sorted(samples) and samples[-1] < total_samples + job["global_batch_size"]
    final = last_json_line(log.stdout)
    assert final["state"] == "finished" and final["world_sizes"] == [1, 2, 1], final
    job_dir = Path(job["job_dir"])
    assert (wire.checkpoint_dir(job_dir) / "checkpoint.pt").is_file()
    assert (wire.final_dir(job_dir) / wire.FINAL_MODEL_FILE).is_file()
    assert wire.metrics_path(job_dir).is_file()
    assert len(wire.rank_log_files(job_dir, 0)) >= 3  # a log per generation
    return final
