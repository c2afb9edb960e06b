"""A centre's pilot, end to end: a real 4-node Slurm cluster, two service replicas from the
project's container image on a real PostgreSQL 15, agents started by the Slurm Prolog, and a
user's own elastic script that crosses a real Slurm preemption and a failover.

The cluster: munged, slurmctld and ``slurmd -N n1`` .. ``-N n4`` of Debian's ``slurm-wlm`` on
this host (tests/slurm_cluster.py says why ports, not network namespaces), the shipped
``interstice slurm conf`` fragment, Prolog, Epilog and placeholder, ``interstice slurm fill``
running every second. The service: ``interstice serve`` twice, from the image that
tests/system/image.py builds, on one PostgreSQL database (the leader holds an advisory lock).
The agents' agent.conf names both replicas.

Timeline (seconds from the job's submission are printed as the test goes, and summed up at
the end for the README):

1. The user submits tests/system/pilot_train.py with ``interstice job submit --nodes 1:4``;
   fill's placeholders start, the Prolog starts an agent per node, and the job grows onto
   them until the workers report world size 4.
2. A ``batch`` job of 2 nodes preempts 2 placeholders: the Epilog stops their agents within
   GraceTime, the batch job starts within GraceTime + 2 s of its submission, and training
   goes on at world size 2.
3. The leader replica gets SIGKILL: the other takes over; the job, its rescales and the
   agents acknowledged before the kill are all there.
4. The batch job ends; fill's new placeholders start, their agents register, and the job
   grows back to world size 4.
5. The rest of the sample budget trains at full speed; the job finishes.

Asserts: every index of every epoch trained exactly once; the final model present and
loadable; ``interstice job logs`` shows every generation; the batch job's start bound; no
process or container of the test left behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from exactly_once import coverage_problems, read_records
from postgres_server import running_postgres
from slurm_cluster import (
    SlurmCluster,
    create_tokens,
    free_port,
    interstice_bin,
    kill_leftovers,
    require_slurm,
    slurm_cluster,
    start_process,
    stop_process,
    wait_for,
    write_agent_conf,
)

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")

from image import ServiceImage, service_image  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

NODES = ("n1", "n2", "n3", "n4")
GRACE_S = 20
"""GraceTime of the scavenger partition and the agents' grace, seconds."""
BATCH_NODES = 2
BATCH_S = 60
"""How long the preempting batch job runs, seconds (the failover happens meanwhile)."""
SLOW_S_PER_SAMPLE = 0.02
"""Seconds per sample of a rank's share until the job has grown back (pilot_train.py's
--pace-file): 200 samples/s at world size 4, 100 at 2."""
TOTAL_SAMPLES = 150 * 512
"""150 epochs of pilot_train.py's 512 samples: at the slow pace, over 380 s at world size 4,
longer than the phases before the grow-back (30,000 samples in 126 s on the loaded 2-core
VM); the rest at full speed (about 800 samples/s there)."""
GLOBAL_BATCH_SIZE = 64
FINISH_TIMEOUT_S = 480.0
"""Bound on the full-speed rest of the budget."""
PHASE_TIMEOUT_S = 240.0
"""Bound on each phase's wait (a generation's start imports torch on a shared 2-core VM)."""
TAKEOVER_TIMEOUT_S = 30.0
"""Bound on the follower taking over after the leader's SIGKILL."""
SCRIPT = Path(__file__).with_name("pilot_train.py")
PILOT_MARKER = "INTERSTICE_PILOT"
"""An environment variable every process the pilot starts outside Slurm carries."""


@dataclass
class Replica:
    """One ``interstice serve`` replica from the image."""

    name: str
    url: str
    process: subprocess.Popen
    image: ServiceImage

    def leader(self) -> bool | None:
        """``leader`` of its ``/readyz``; None when it does not answer."""
        try:
            return httpx.get(f"{self.url}/readyz", timeout=2).json()["leader"]
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    def kill(self) -> None:
        """SIGKILL the replica's process (``kill -9``, in its container where it has one)."""
        self.image.kill(self.name, self.process)


@dataclass
class Pilot:
    """The running pilot: the Slurm cluster, the replicas, the tokens, the timeline."""

    slurm: SlurmCluster
    replicas: list[Replica]
    tokens: dict[str, str]
    log_dir: Path
    jobs_root: Path
    env: dict[str, str]
    fill: subprocess.Popen | None = None
    timeline: list[tuple[float, str]] = field(default_factory=list)
    submitted_at: float = 0.0

    def logs(self) -> list[Path]:
        """Every log of the pilot, for a failure message: the daemons', the replicas', and
        each worker's (where a worker that never stepped dumps its stacks after 120 s,
        interstice.elastic.watchdog)."""
        ranks = sorted(self.jobs_root.rglob("rank-*.log"))
        return [*self.slurm.logs(), *sorted(self.log_dir.glob("*.log")), *ranks]

    def start_fill(self) -> None:
        """Start ``interstice slurm fill`` with a pass every second."""
        command = self.slurm.fill_command("--interval-s", "1")
        self.fill = start_process(command, self.log_dir / "fill.log", self.slurm.env | self.env)

    def mark(self, what: str, at: float | None = None) -> None:
        """Add ``what`` to the timeline (now, or at ``at``) and print it."""
        at = time.time() if at is None else at
        self.timeline.append((at, what))
        print(f"[{at - self.submitted_at:7.1f} s] {what}", flush=True)

    def print_timeline(self, job: dict) -> None:
        """The timeline, with the job's rescales, in seconds from the submission."""
        rescales = []
        for r in job["rescales"]:
            cost = "unmeasured" if r["cost_s"] is None else f"cost {r['cost_s']:.1f} s"
            what = f"rescale {len(r['from_nodes'])} -> {len(r['to_nodes'])} nodes"
            rescales.append((_timestamp(r["at"]), f"{what} ({r['reason']}, {cost})"))
        print("\npilot timeline (seconds from the submission):")
        for at, what in sorted(self.timeline + rescales):
            print(f"  {at - self.submitted_at:7.1f}  {what}")

    def api(self, method: str, path: str, role: str = "admin") -> dict:
        """GET/POST ``path`` on the first replica that answers, as ``role``."""
        headers = {"Authorization": f"Bearer {self.tokens[role]}"}
        for replica in self.replicas:
            try:
                response = httpx.request(
                    method, f"{replica.url}{path}", headers=headers, timeout=10
                )
            except httpx.TransportError:
                continue
            response.raise_for_status()
            return response.json()
        raise AssertionError(f"no replica answers {method} {path}")

    def job_cli(self, *arguments: str, server: str | None = None) -> subprocess.CompletedProcess:
        """``interstice job ARGUMENTS`` as the user, against ``server`` (default: replica 0)."""
        return subprocess.run(
            [interstice_bin(), "job", *arguments, "--server", server or self.replicas[0].url],
            capture_output=True,
            text=True,
            timeout=FINISH_TIMEOUT_S + 60,
            env=self.env | {"INTERSTICE_TOKEN": self.tokens["user"]},
            check=False,
        )

    def wait(
        self, what: str, check: Callable[[], object], timeout_s: float = PHASE_TIMEOUT_S
    ) -> Any:
        """Poll ``check`` until truthy and return its value; fail with every log's tail after
        ``timeout_s`` (60 lines: a worker's stack dump)."""
        return wait_for(what, check, timeout_s, self.logs, tail_lines=60)

    def world_sizes(self, job_id: str) -> list[int]:
        """The world sizes the workers reported (the metrics series), repeats merged."""
        series = self.api("GET", f"/v1/jobs/{job_id}/metrics", role="user")["data"]
        return _merged([point["world_size"] for point in series if point["world_size"]])


@pytest.fixture
def pilot(tmp_path: Path) -> Iterator[Pilot]:
    """PostgreSQL, two replicas from the image, the 4-node Slurm cluster (``start_fill``
    starts ``interstice slurm fill``).

    Stopped in order afterwards: fill, every Slurm job (their Epilogs stop the agents), the
    daemons, the replicas. A process or container of the pilot still there after that is
    killed and fails the test.
    """
    require_slurm()
    image = service_image()
    log_dir = tmp_path / "log"
    log_dir.mkdir(mode=0o700)
    jobs_root = tmp_path / "jobs"
    jobs_root.mkdir()
    # Every process the pilot starts outside Slurm carries this; Slurm's carry SLURM_CONF.
    env = {**os.environ, PILOT_MARKER: str(tmp_path)}
    replicas: list[Replica] = []
    leftovers: list[str] = []
    with running_postgres() as postgres:
        database = postgres.new_database()
        # made from the image, as a centre would
        interstice = image.interstice_argv([])
        tokens = create_tokens(interstice, database, ("admin", "agent", "user"), 120)
        try:
            for name in ("replica-a", "replica-b"):
                port = free_port()
                settings = {
                    "INTERSTICE_DB_URL": database,
                    "INTERSTICE_CHECKPOINT_ROOT": str(jobs_root),
                    "INTERSTICE_HEARTBEAT_INTERVAL_S": "2",
                }
                argv = image.serve_argv(name, port, settings, volumes=[jobs_root])
                process = start_process(argv, log_dir / f"{name}.log", env)
                replicas.append(Replica(name, f"http://127.0.0.1:{port}", process, image))
            urls = [replica.url for replica in replicas]
            agent_conf = write_agent_conf(tmp_path, urls, tokens["agent"], GRACE_S)
            with slurm_cluster(tmp_path, NODES, GRACE_S, agent_conf) as slurm:
                pilot = Pilot(slurm, replicas, tokens, log_dir, jobs_root, env)
                for replica in replicas:
                    pilot.wait(
                        f"{replica.name} to answer", lambda r=replica: r.leader() is not None
                    )
                try:
                    yield pilot
                finally:
                    if pilot.fill is not None:
                        stop_process(pilot.fill)
            leftovers += slurm.leftovers
        finally:
            for replica in replicas:
                image.stop(replica.name, replica.process)
            leftovers += kill_leftovers(f"{PILOT_MARKER}={tmp_path}")
            leftovers += [f"container {name}" for name in image.leftover_containers()]
    assert not leftovers, f"processes or containers of the pilot left behind: {leftovers}"


# One rerun: in one run of four (the CI run of db73ac9, the VM loaded by other work), the
# generation started after the grow-back never reported: its 4 workers started and printed
# nothing for 240 s (docs/known-limits.md). A second hang in a row fails the test.
@pytest.mark.flaky(reruns=1)
def test_pilot(pilot: Pilot, tmp_path: Path) -> None:
    # 1. The user's script, submitted before any node is idle; fill then starts placeholders.
    workdir = tmp_path / "user"
    workdir.mkdir()
    shutil.copy(SCRIPT, workdir / "train.py")
    pace = workdir / "pace"
    pace.write_text(f"{SLOW_S_PER_SAMPLE}")
    records = workdir / "records"
    command = (
        "train.py --checkpoint-dir {checkpoint_dir} --total-samples {total_samples} "
        "--global-batch-size {global_batch_size} "
        f"--record-samples {records} --pace-file {pace}"
    )
    submitted = pilot.job_cli(
        "submit", "--nodes", "1:4", "--workdir", str(workdir), "--command", command,
        "--total-samples", str(TOTAL_SAMPLES), "--global-batch-size", str(GLOBAL_BATCH_SIZE),
    )  # fmt: skip
    pilot.submitted_at = time.time()
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[-1]
    pilot.mark(f"job {job_id} submitted (--nodes 1:4)")
    pilot.start_fill()
    pilot.wait("world size 4", lambda: pilot.world_sizes(job_id)[-1:] == [4])
    pilot.mark(f"workers report world size 4 (sizes so far {pilot.world_sizes(job_id)})")

    # 2. A batch job of 2 nodes preempts 2 placeholders.
    started_file = tmp_path / "batch-started"
    stamp = "python3 -c 'import time; print(time.time())'"
    batch_submitted_at = time.time()
    batch_id = pilot.slurm.slurm(
        "sbatch", "--parsable", "-p", "batch", "-N", str(BATCH_NODES), "-o", "/dev/null",
        f"--wrap={stamp} > {started_file}.tmp && mv {started_file}.tmp {started_file}; "
        f"sleep {BATCH_S}",
    ).strip()  # fmt: skip
    pilot.mark(f"batch job {batch_id} submitted ({BATCH_NODES} nodes)", batch_submitted_at)
    started = pilot.wait("the batch job to start", lambda: _read_float(started_file))
    pilot.mark("batch job started", started)
    batch_start_s = started - batch_submitted_at
    assert batch_start_s <= GRACE_S + 2, f"batch job started {batch_start_s:.1f} s after submit"
    pilot.wait("world size 2", lambda: pilot.world_sizes(job_id)[-1:] == [2])
    pilot.mark("workers report world size 2")

    # 3. SIGKILL of the leader replica while the job trains at 2.
    before = pilot.api("GET", f"/v1/jobs/{job_id}")
    alive_before = _alive_agents(pilot)
    leader = next(replica for replica in pilot.replicas if replica.leader())
    follower = next(replica for replica in pilot.replicas if replica is not leader)
    leader.kill()
    pilot.mark(f"{leader.name} (leader) killed with SIGKILL")
    pilot.wait(f"{follower.name} to lead", follower.leader, TAKEOVER_TIMEOUT_S)
    pilot.mark(f"{follower.name} leads")
    pilot.replicas = [follower]
    after = pilot.api("GET", f"/v1/jobs/{job_id}")
    assert after["rescales"][: len(before["rescales"])] == before["rescales"]
    assert after["samples_done"] >= before["samples_done"]
    assert after["state"] == "running"

    # 4. The batch job ends; new placeholders start; the job grows back to 4.
    pilot.wait(
        "the batch job to end",
        lambda: not pilot.slurm.slurm("squeue", "-h", "-j", batch_id, "-o", "%i").strip(),
        BATCH_S + PHASE_TIMEOUT_S,
    )
    pilot.mark("batch job ended")
    pilot.wait("world size 4 again", lambda: pilot.world_sizes(job_id)[-1:] == [4])
    pilot.mark("workers report world size 4 again")
    # The agents that were alive at the kill stayed so through the failover (none lost).
    assert alive_before <= _alive_agents(pilot) | _left_agents(pilot)
    assert not _lost_agents(pilot), _lost_agents(pilot)

    # 5. The rest of the budget at full speed, to the end.
    pace.unlink()
    pilot.mark("pace file removed: full speed")
    waited = pilot.job_cli(
        "wait", job_id, "--timeout-s", f"{FINISH_TIMEOUT_S:g}", server=follower.url
    )
    assert waited.returncode == 0, (waited.stdout, waited.stderr)
    job = pilot.api("GET", f"/v1/jobs/{job_id}")
    pilot.mark("job finished", _timestamp(job["finished_at"]))
    logs = pilot.job_cli("logs", job_id, "--rank", "0", "--tail", "100000", server=follower.url)

    # Every index of every epoch trained exactly once, across every rescale.
    assert job["state"] == "finished" and job["samples_done"] >= TOTAL_SAMPLES
    problems = coverage_problems(read_records(records), 512, TOTAL_SAMPLES // 512)
    assert not problems, problems[:10]
    # The final model, loadable into the script's model.
    final = Path(job["job_dir"]) / "final" / "model.pt"
    model = torch.nn.Linear(8, 2)
    model.load_state_dict(torch.load(final, weights_only=True))
    # Every generation that trained is in the rank 0 log that `interstice job logs` shows.
    assert logs.returncode == 0, logs.stderr
    started_sizes = [
        int(line.split("world_size=")[1].split()[0])
        for line in logs.stdout.splitlines()
        if line.startswith("generation start:")
    ]
    reported = pilot.world_sizes(job_id)
    assert _merged(started_sizes) == reported, (started_sizes, reported)
    assert _is_subsequence([4, 2, 4], reported), reported
    measured = [r for r in job["rescales"] if r["cost_s"] is not None]
    assert len(started_sizes) >= len(measured), (started_sizes, job["rescales"])

    pilot.print_timeline(job)


def _read_float(path: Path) -> float | None:
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        return None


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _agents(pilot: Pilot, state: str) -> set[str]:
    return {a["agent_id"] for a in pilot.api("GET", "/v1/agents")["data"] if a["state"] == state}


def _alive_agents(pilot: Pilot) -> set[str]:
    return _agents(pilot, "alive")


def _left_agents(pilot: Pilot) -> set[str]:
    return _agents(pilot, "left")


def _lost_agents(pilot: Pilot) -> set[str]:
    return _agents(pilot, "lost")


def _merged(sizes: list[int]) -> list[int]:
    return [size for i, size in enumerate(sizes) if i == 0 or sizes[i - 1] != size]


def _is_subsequence(wanted: list[int], sizes: list[int]) -> bool:
    remaining = iter(sizes)
    return all(any(size == w for size in remaining) for w in wanted)
