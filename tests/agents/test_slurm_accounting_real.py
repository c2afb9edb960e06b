"""``interstice trace from-slurm`` on a real Slurm's records, checked against what the jobs
did, to the second.

A temporary three-node cluster (tests/slurm_cluster.py) runs a known set of short ``sleep``
jobs on named nodes: two nodes at once (``n[1-2]``, a compressed node list), two jobs one
after the other on ``n3``, a job cancelled before it started, and a job still running when
the records are read. Slurm's own record of each finished job comes from the job completion
log (``JobCompType=jobcomp/filetxt``), written as sacct's ``--parsable2`` lines; the running
job comes from ``squeue`` with ``End`` ``Unknown``, as sacct prints it. Accounting through
slurmdbd (what ``sacct`` reads in Slurm 22.05) needs a MariaDB server, database and grants set
up per test run, packages the test environment does not install; the completion log holds the
same fields (job id, node list, start, end, state, partition), in the same local-time format.

What the jobs did comes from ``scontrol show job`` in seconds since the epoch: each node's
state, second by second over the window, must equal the trace's.
"""

import re
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from interstice.replay.trace import load_trace
from slurm_cluster import SlurmCluster, slurm_cluster, wait_for, write_agent_conf
from typer.testing import CliRunner

from interstice.cli import app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NODES = ("n1", "n2", "n3")
GRACE_S = 5


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    """The cluster with a job completion log at ``tmp_path/jobcomp.txt``."""
    agent_conf = write_agent_conf(tmp_path, ["http://127.0.0.1:1"], "unused", GRACE_S)
    extra = f"JobCompType=jobcomp/filetxt\nJobCompLoc={tmp_path}/jobcomp.txt\n"
    with slurm_cluster(tmp_path, NODES, GRACE_S, agent_conf, extra_conf=extra) as running:
        yield running


def submit(cluster: SlurmCluster, *options: str) -> str:
    """``sbatch --parsable`` in the batch partition; returns the job id."""
    out = cluster.slurm(
        "sbatch", "--parsable", "-p", "batch", "-o", str(cluster.root / "job-%j.out"), *options
    )
    return out.strip().split(";")[0]


def job_fields(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    """``scontrol show job -o`` of one job, times in seconds since the epoch."""
    env = {**cluster.env, "SLURM_TIME_FORMAT": "%s"}
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def jobcomp_as_sacct(path: Path) -> list[str]:
    """The completion log's records as sacct ``--parsable2`` lines (JobID ... Partition)."""
    lines = []
    for record in path.read_text().splitlines():
        field = dict(re.findall(r"(\w+)=(\S*)", record))
        lines.append(
            "|".join(
                field[key]
                for key in ("JobId", "NodeList", "StartTime", "EndTime", "JobState", "Partition")
            )
        )
    return lines


def test_trace_matches_what_the_jobs_did(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window_start = int(time.time())
    pair = submit(cluster, "-N", "2", "-w", "n[1-2]", "--wrap", "sleep 3")
    first = submit(cluster, "-w", "n3", "--wrap", "sleep 2")
    second = submit(cluster, "-w", "n3", "--wrap", "sleep 2")
    never = submit(cluster, "-w", "n1", "--begin", "now+3600", "--wrap", "sleep 1")
    cluster.slurm("scancel", never)
    finished = [pair, first, second]

    def all_finished() -> bool:
        return all(job_fields(cluster, job)["JobState"] == "COMPLETED" for job in finished)

    wait_for("the short jobs to complete", all_finished, 60, cluster.logs)
    running = submit(cluster, "-w", "n2", "--wrap", "sleep 300")
    wait_for(
        "the long job to run",
        lambda: job_fields(cluster, running)["JobState"] == "RUNNING",
        30,
        cluster.logs,
    )
    time.sleep(1)  # the running job holds n2 for at least a second of the window
    wait_for(
        "the completion log to hold every ended job",
        lambda: len(jobcomp_as_sacct(cluster.root / "jobcomp.txt")) >= 4,
        30,
        cluster.logs,
    )
    window_end = int(time.time()) + 1

    squeue = cluster.slurm("squeue", "-h", "-j", running, "-o", "%i|%N|%S|Unknown|%T|%P")
    sacct = ["JobID|NodeList|Start|End|State|Partition"]
    sacct += jobcomp_as_sacct(cluster.root / "jobcomp.txt") + [squeue.strip()]
    (tmp_path / "jobs.txt").write_text("\n".join(sacct) + "\n")
    assert "n[1-2]" in (tmp_path / "jobs.txt").read_text()

    def local(epoch: int) -> str:  # as the admin types --start/--end: this host's zone
        return datetime.fromtimestamp(epoch).isoformat()

    # agent.conf names the scavenger partition: the default exclusion.
    monkeypatch.setenv("INTERSTICE_AGENT_CONF", str(tmp_path / "agent.conf"))
    out = tmp_path / "mine.csv.gz"
    result = CliRunner().invoke(
        app,
        ["trace", "from-slurm", str(tmp_path / "jobs.txt"), "--nodes", "n[1-3]"]
        + ["--start", local(window_start), "--end", local(window_end), "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "1 never started" in result.stdout and "(scavenger)" in result.stdout

    # What the jobs did, from scontrol: busy[node][s] for each second of the window.
    seconds = window_end - window_start
    expected = {node: [False] * seconds for node in NODES}
    for job in [*finished, running]:
        fields = job_fields(cluster, job)
        begin = int(fields["StartTime"]) - window_start
        end = seconds if job == running else int(fields["EndTime"]) - window_start
        for node in {"n[1-2]": ["n1", "n2"]}.get(fields["NodeList"], [fields["NodeList"]]):
            for second in range(max(begin, 0), min(end, seconds)):
                expected[node][second] = True

    trace = load_trace(out)
    assert trace.start == np.datetime64(window_start, "s")  # written in UTC
    assert trace.duration_s == seconds
    got = {}
    for index, node in enumerate(trace.node_names):
        state = not trace.initial_idle[index]
        mask = trace.change_node == index
        changes = list(zip(trace.change_time_s[mask], trace.change_idle[mask], strict=True))
        row = []
        for second in range(seconds):
            while changes and changes[0][0] <= second:
                state = not changes.pop(0)[1]
            row.append(state)
        got[str(node)] = row
    assert got == expected
    assert any(expected["n3"]) and expected["n2"][-1]
