"""Bad user jobs end clearly, never hang: a missing script and a script that crashes on one
rank fail the job with the reason (the failing rank's last log lines) and give the nodes
back to the pool; a fractional ``total_samples`` and an argv the OS would refuse are a 422
naming the field, and exit code 2 with one line from ``interstice job submit``.

The service and two real agents run as subprocesses (:class:`LocalCluster`); every wait is
on a condition with a bound.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

from interstice.agents.local_cluster import LocalCluster  # noqa: E402
from local_jobs import start_cluster  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from interstice.cli import app  # noqa: E402

NODES = ["e0", "e1"]
FAIL_TIMEOUT_S = 120.0  # start on both nodes + failure + heartbeat, on a loaded machine
LINUX_MAX_ARG_STRLEN = 131072  # execve refuses a longer argument (E2BIG)

CRASHING_SCRIPT = """\
import os, sys, time

rank = int(os.environ["RANK"])
print(f"rank {rank} of {os.environ['WORLD_SIZE']} starting", flush=True)
if rank == 1:
    print("loading shard 1", flush=True)
    print("ValueError: shard 1 is corrupt", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(600)  # rank 0 would train on: the failure must stop it
"""


# The same failure as most PyTorch scripts raise it: an exception under torch elastic's
# @record, which writes an error file the launcher reads.
RECORDED_CRASH_SCRIPT = """\
import os, sys, time

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    rank = int(os.environ["RANK"])
    print(f"rank {rank} of {os.environ['WORLD_SIZE']} starting", flush=True)
    if rank == 1:
        print("loading shard 1", flush=True)
        raise ValueError("shard 1 is corrupt")
    time.sleep(600)


main()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("errors"), NODES, heartbeat_s=1.0)
    start_cluster(cluster)
    try:
        cluster.node_events("idle", NODES)
        yield cluster
    finally:
        cluster.close()


def submit(cluster: LocalCluster, **fields: Any) -> str:
    body = {"min_nodes": 2, "max_nodes": 2, "total_samples": 1000, "nproc_per_node": 1, **fields}
    return cluster.request("user", "POST", "/v1/jobs", json=body)["job_id"]


def wait_failed(cluster: LocalCluster, job_id: str) -> dict[str, Any]:
    """The job once it failed; TimeoutError (with the logs) if it does not within the bound;
    AssertionError if it ends otherwise."""
    job = cluster.wait_for(
        lambda: (
            (j := cluster.request("user", "GET", f"/v1/jobs/{job_id}"))["state"]
            not in ("queued", "running")
            and j
        ),
        FAIL_TIMEOUT_S,
        f"job {job_id} ended",
        period_s=0.5,
    )
    assert job["state"] == "failed", (job, cluster.diagnostics())
    return job


def assert_nodes_back_in_the_pool(cluster: LocalCluster) -> None:
    def free() -> bool:
        nodes = cluster.service_nodes()
        return all(n["holder"] is None and n["allocatable"] for n in nodes)

    cluster.wait_for(free, 30, "every node unheld and allocatable", period_s=0.5)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_missing_script_fails_the_job_and_frees_its_nodes(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    job_id = submit(cluster, command=["no_such_train.py", "--epochs", "3"], workdir=str(tmp_path))
    job = wait_failed(cluster, job_id)
    assert "no_such_train.py" in job["error"], job["error"]
    assert_nodes_back_in_the_pool(cluster)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", [CRASHING_SCRIPT, RECORDED_CRASH_SCRIPT], ids=["exit", "record"])
def test_a_crash_on_one_rank_fails_the_job_with_its_last_lines(
    cluster: LocalCluster, tmp_path: Path, script: str
) -> None:
    (tmp_path / "crash.py").write_text(script)
    job_id = submit(cluster, command=["crash.py"], workdir=str(tmp_path))
    job = wait_failed(cluster, job_id)
    assert "ValueError: shard 1 is corrupt" in job["error"], job["error"]
    assert "loading shard 1" in job["error"], job["error"]
    assert_nodes_back_in_the_pool(cluster)
    # The failing rank's output is in its log too, through the API.
    logs = cluster.request("user", "GET", f"/v1/jobs/{job_id}/logs", params={"rank": 1})
    assert "shard 1 is corrupt" in logs["text"]


def post_job(cluster: LocalCluster, **fields: Any) -> httpx.Response:
    body = {"min_nodes": 1, "max_nodes": 1, "command": ["train.py"], **fields}
    body.setdefault("total_samples", 1000)
    return httpx.post(
        f"{cluster.url}/v1/jobs",
        json=body,
        headers={"Authorization": f"Bearer {cluster.tokens['user']}"},
        timeout=30,
    )


def field_of_422(answer: httpx.Response) -> str:
    assert answer.status_code == 422, answer.text
    return ".".join(str(p) for p in answer.json()["detail"][0]["loc"])


def submit_cli(cluster: LocalCluster, *args: str) -> tuple[int, str]:
    flags = ["--server", cluster.url, "--token", cluster.tokens["user"]]
    result = CliRunner().invoke(app, ["job", "submit", "--nodes", "1", *args, *flags])
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return result.exit_code, lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("total_samples", [1.5, 5e-324, "many", True])
def test_a_non_integer_total_samples_is_refused(cluster: LocalCluster, total_samples) -> None:
    assert "total_samples" in field_of_422(post_job(cluster, total_samples=total_samples))


@pytest.mark.slow
def test_the_cli_refuses_a_fractional_total_samples(cluster: LocalCluster) -> None:
    code, line = submit_cli(cluster, "--command", "train.py", "--total-samples", "1.5")
    assert code == 2 and "total_samples" in line


@pytest.mark.slow
def test_an_argv_the_os_would_refuse_is_refused_at_submission(cluster: LocalCluster) -> None:
    too_long = "x" * (LINUX_MAX_ARG_STRLEN + 1)
    assert field_of_422(post_job(cluster, command=["train.py", too_long])) == "body.command"
    too_many = ["train.py"] + ["-v"] * 1000
    assert field_of_422(post_job(cluster, command=too_many)) == "body.command"
    code, line = submit_cli(cluster, "--command", f"train.py {too_long}", "--total-samples", "9")
    assert code == 2 and "command" in line
    # Nothing of it was queued.
    jobs = cluster.request("user", "GET", "/v1/jobs", params={"state": "queued"})
    assert all(too_long not in (job["command"] or []) for job in jobs["data"])
