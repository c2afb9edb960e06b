"""A centre's pilot, end to end: a real 4-node Slurm cluster, two service replicas from the
project's container image on a real PostgreSQL 15 in multi-user mode with MUNGE, agents
started as root by the Slurm Prolog, and two users' own elastic scripts, each run as its
owner, that cross a real Slurm preemption and a failover.

The cluster: munged, slurmctld and ``slurmd -N n1`` .. ``-N n4`` of Debian's ``slurm-wlm`` on
this host (tests/slurm_cluster.py says why ports, not network namespaces), the shipped
``interstice slurm conf`` fragment, Prolog, Epilog and placeholder, ``interstice slurm fill``
running every second. The service: ``interstice serve`` twice, from the image that
tests/system/image.py builds, on one PostgreSQL database (the leader holds an advisory lock),
with ``INTERSTICE_AUTH_MUNGE`` and ``INTERSTICE_MULTI_USER`` on: each replica decodes
credentials with the image's ``unmunge`` through the cluster's munged (the same key as
Slurm's; its socket's folder mounted in) and finds the users in the host's /etc/passwd
(mounted read-only). The agents' agent.conf names both replicas.

The users: alice and bob (tests/unix_accounts.py), each with a 0700 folder of their own
under the checkpoint root, as an admin makes it.

Timeline (seconds from the first submission are printed as the test goes, and summed up at
the end for the README):

1. alice and bob each submit tests/system/pilot_train.py with ``interstice job submit
   --nodes 1:2``, run as themselves (``runuser``) without a token: the CLI sends a MUNGE
   credential. fill's placeholders start, the Prolog starts an agent per node, and the jobs
   grow onto them until the workers of each report world size 2 (4 nodes in all); ``ps``
   and ``/proc/<pid>/status`` show each job's workers under its owner's uid.
2. A ``batch`` job of 2 nodes preempts 2 placeholders: the Epilog stops their agents within
   GraceTime, the batch job starts within GraceTime + 2 s of its submission, and training
   goes on on the 2 nodes left.
3. The leader replica gets SIGKILL: the other takes over; the jobs, their rescales and the
   agents acknowledged before the kill are all there.
4. The batch job ends; fill's new placeholders start, their agents register, and the jobs
   grow back to world size 2 each.
5. The rest of the sample budgets trains at full speed; both jobs finish.

Asserts, for each job: its owner is its submitter; every index of every epoch trained
exactly once; the final model present, owned by the owner and loadable; ``interstice job
logs`` (as the owner) shows every generation. And: a preemption rescaled a job; the batch
job's start bound; no process or container of the test left behind.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
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
from unix_accounts import USERS, owner_accounts  # noqa: E402

from interstice.wire import (  # noqa: E402
    ENV_FIRST_STEP_DUMP_S,
    ENV_MUNGE_SOCKET,
    ENV_SLURM_JOB_MARKER,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

NODES = ("n1", "n2", "n3", "n4")
REPLICAS = ("replica-a", "replica-b")
NODES_PER_JOB = 2
"""Each user's job runs on 1 to 2 nodes: both at their most fill the 4 nodes."""
GRACE_S = 20
"""GraceTime of the scavenger partition and the agents' grace, seconds."""
BATCH_NODES = 2
BATCH_MAX_S = 600
"""The preempting batch job runs until the test has checked the failover (it creates the
batch job's release file), at most this long, seconds."""
SLOW_S_PER_SAMPLE = 0.02
"""Seconds per sample of a rank's share until the jobs have grown back (pilot_train.py's
--pace-file): 100 samples/s per job at world size 2, 50 at 1."""
TOTAL_SAMPLES = 75 * 512
"""Each job's budget, 75 epochs of pilot_train.py's 512 samples (both jobs together train
what one job of 150 epochs would): at the slow pace, over 380 s at world size 2, longer
than the phases before the grow-back (126 s on the loaded 2-core VM); the rest at full
speed."""
GLOBAL_BATCH_SIZE = 64
FINISH_TIMEOUT_S = 480.0
"""Bound on the full-speed rest of each budget."""
STALL_TIMEOUT_S = 180.0
"""The replicas' ``generation_start_timeout_s``: a generation whose workers make no first
step this long after its commands (once in four runs on a loaded VM, the generation started
after the grow-back printed nothing for 240 s) is released and started anew by the service.
A generation's start, its rendezvous included, took up to 45 s there: four times that leaves
a start slowed by load alone unreleased. The workers dump their stacks to their rank logs
after half of it (``INTERSTICE_FIRST_STEP_DUMP_S``), before the release ends them."""
PHASE_TIMEOUT_S = 2 * STALL_TIMEOUT_S + 120.0
"""Bound on each phase's wait: a generation's start (imports, a rendezvous on a shared
2-core VM), and room for one stalled generation's release and a new start."""
TAKEOVER_TIMEOUT_S = 30.0
"""Bound on the follower taking over after the leader's SIGKILL."""
SCRIPT = Path(__file__).with_name("pilot_train.py")
PILOT_MARKER = "PILOT_ROOT"
"""An environment variable every process the pilot starts outside Slurm carries, and the
jobs' workers started by a fresh launcher (the job's ``env``; a job's name may not start
with ``INTERSTICE_``)."""


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
    """The running pilot: the Slurm cluster, the replicas, the tokens, the users, the
    timeline."""

    slurm: SlurmCluster
    replicas: list[Replica]
    tokens: dict[str, str]
    accounts: dict[str, pwd.struct_passwd]
    log_dir: Path
    jobs_root: Path
    env: dict[str, str]
    fill: subprocess.Popen | None = None
    timeline: list[tuple[float, str]] = field(default_factory=list)
    submitted_at: float = 0.0

    @property
    def munge_socket(self) -> Path:
        """The cluster's munged's socket (Slurm's and the service's)."""
        return self.slurm.root / "munge" / "munge.socket"

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

    def print_timeline(self, jobs: dict[str, dict]) -> None:
        """The timeline, with each user's job's rescales, in seconds from the submission."""
        rescales = []
        for user, job in jobs.items():
            for r in job["rescales"]:
                cost = "unmeasured" if r["cost_s"] is None else f"cost {r['cost_s']:.1f} s"
                what = f"{user}: rescale {len(r['from_nodes'])} -> {len(r['to_nodes'])} nodes"
                rescales.append((_timestamp(r["at"]), f"{what} ({r['reason']}, {cost})"))
        print("\npilot timeline (seconds from the submission):")
        for at, what in sorted(self.timeline + rescales):
            print(f"  {at - self.submitted_at:7.1f}  {what}")

    def api(self, method: str, path: str) -> dict:
        """GET/POST ``path`` on the first replica that answers, as the admin."""
        headers = {"Authorization": f"Bearer {self.tokens['admin']}"}
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

    def job_cli(
        self, user: str, *arguments: str, server: str | None = None
    ) -> subprocess.CompletedProcess:
        """``interstice job ARGUMENTS`` run as ``user`` (``runuser``) with no token, against
        ``server`` (default: replica 0): the CLI sends a MUNGE credential of the user's."""
        env = {name: v for name, v in self.env.items() if not name.startswith("INTERSTICE_")}
        env[ENV_MUNGE_SOCKET] = str(self.munge_socket)
        server = server or self.replicas[0].url
        return subprocess.run(
            ["runuser", "-u", user, "--", interstice_bin(), "job", *arguments, "--server", server],
            capture_output=True,
            text=True,
            timeout=FINISH_TIMEOUT_S + 60,
            env=env,
            cwd="/",
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
        series = self.api("GET", f"/v1/jobs/{job_id}/metrics")["data"]
        return _merged([point["world_size"] for point in series if point["world_size"]])

    def settled(self, job_ids: dict[str, str], nodes: int) -> dict[str, int] | None:
        """Each user's job's node count where the jobs hold ``nodes`` nodes in all and the
        workers of each job that holds any report that many as their world size; else
        None."""
        sizes = {}
        for user, job_id in job_ids.items():
            held = len(self.api("GET", f"/v1/jobs/{job_id}")["nodes"])
            if held and self.world_sizes(job_id)[-1:] != [held]:
                return None
            sizes[user] = held
        return sizes if sum(sizes.values()) == nodes else None


@contextmanager
def passable_folder() -> Iterator[Path]:
    """A new folder in /tmp, root's and 0755, removed afterwards: the pilot's root, which the
    users' processes pass through (munged's socket, the agents' workdir, the checkpoint
    root), unlike pytest's 0700 tmp_path."""
    root = Path(tempfile.mkdtemp(prefix="interstice-pilot-", dir="/tmp"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pilot(tmp_path: Path) -> Iterator[Pilot]:
    """PostgreSQL, the 4-node Slurm cluster, two replicas from the image in multi-user mode
    with MUNGE, alice and bob with their folders in the checkpoint root (``start_fill``
    starts ``interstice slurm fill``).

    Stopped in order afterwards: fill, every Slurm job (their Epilogs stop the agents), the
    daemons, the replicas. A process or container of the pilot still there after that is
    killed and fails the test.
    """
    require_slurm()
    image = service_image()
    log_dir = tmp_path / "log"
    log_dir.mkdir(mode=0o700)
    leftovers: list[str] = []
    started_at = time.time()
    with owner_accounts() as accounts, passable_folder() as root, running_postgres() as postgres:
        jobs_root = root / "jobs"
        jobs_root.mkdir(mode=0o755)
        for name, account in accounts.items():
            (jobs_root / name).mkdir(mode=0o700)
            os.chown(jobs_root / name, account.pw_uid, account.pw_gid)
        # Every process the pilot starts carries this; Slurm's carry SLURM_CONF.
        env = {**os.environ, PILOT_MARKER: str(root)}
        replicas: list[Replica] = []
        database = postgres.new_database()
        # made from the image, as a centre would
        tokens = create_tokens(image.interstice_argv([]), database, ("admin", "agent"), 120)
        ports = {name: free_port() for name in REPLICAS}
        urls = [f"http://127.0.0.1:{port}" for port in ports.values()]
        agent_conf = write_agent_conf(root, urls, tokens["agent"], GRACE_S)
        try:
            with slurm_cluster(root, NODES, GRACE_S, agent_conf) as slurm:
                # the replicas need munged at start-up: the cluster's, started just now
                munge_folder = slurm.root / "munge"
                for (name, port), url in zip(ports.items(), urls, strict=True):
                    settings = {
                        "INTERSTICE_DB_URL": database,
                        "INTERSTICE_CHECKPOINT_ROOT": str(jobs_root),
                        "INTERSTICE_HEARTBEAT_INTERVAL_S": "2",
                        "INTERSTICE_AUTH_MUNGE": "true",
                        "INTERSTICE_MUNGE_SOCKET": str(munge_folder / "munge.socket"),
                        "INTERSTICE_MULTI_USER": "true",
                        "INTERSTICE_GENERATION_START_TIMEOUT_S": f"{STALL_TIMEOUT_S:g}",
                    }
                    argv = image.serve_argv(
                        name,
                        port,
                        settings,
                        volumes=[jobs_root, munge_folder],
                        read_only=[Path("/etc/passwd")],
                    )
                    process = start_process(argv, log_dir / f"{name}.log", env)
                    replicas.append(Replica(name, url, process, image))
                pilot = Pilot(slurm, replicas, tokens, accounts, log_dir, jobs_root, env)
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
            leftovers += kill_leftovers(f"{PILOT_MARKER}={root}")
            leftovers += owner_leftovers(accounts, started_at)
            leftovers += [f"container {name}" for name in image.leftover_containers()]
    assert not leftovers, f"processes or containers of the pilot left behind: {leftovers}"


def user_workdir(pilot: Pilot, user: str) -> Path:
    """``user``'s folder with the script (``train.py``), its records folder and the pace file,
    the user's and 0700 (the pace file 0644, for the test to remove)."""
    account = pilot.accounts[user]
    workdir = pilot.slurm.root / "users" / user
    (workdir / "records").mkdir(parents=True)
    workdir.chmod(0o700)
    shutil.copy(SCRIPT, workdir / "train.py")
    (workdir / "pace").write_text(f"{SLOW_S_PER_SAMPLE}")
    for path in (workdir, workdir / "records", workdir / "train.py", workdir / "pace"):
        os.chown(path, account.pw_uid, account.pw_gid)
    return workdir


def worker_processes(workdir: Path) -> dict[int, tuple[set[int], str]]:
    """The live workers of the job whose script records into ``workdir/records`` (each names
    its pid in its file's name, pilot_train.py): each pid's real, effective, saved and
    file-system uids (``/proc/<pid>/status``) and the user ``ps`` shows."""
    found = {}
    for records in (workdir / "records").glob("rank*-pid*.txt"):
        pid = int(records.stem.rsplit("-pid", 1)[1])
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue  # a worker of an earlier generation
        uids = next(line for line in status.splitlines() if line.startswith("Uid:"))
        ps = ["ps", "-o", "user=", "-p", str(pid)]
        shown = subprocess.run(ps, capture_output=True, text=True, check=False)
        found[pid] = ({int(uid) for uid in uids.split()[1:]}, shown.stdout.strip())
    return found


def owner_leftovers(accounts: dict[str, pwd.struct_passwd], since: float) -> list[str]:
    """SIGKILL every process that an agent started as one of the users since ``since``: of
    their uids, with the placeholder's marker ``INTERSTICE_SLURM_JOB_ID`` (an owner's
    processes get a clean environment: no marker of the pilot's reaches those of a spare
    launcher).

    Returns:
        ``"<pid>: <user> <command line>"`` of each process killed (empty: none was left).
    """
    users = {account.pw_uid: name for name, account in accounts.items()}
    killed = []
    for process in psutil.process_iter(["uids", "create_time", "environ", "cmdline"]):
        uids, created, environ = (process.info[key] for key in ("uids", "create_time", "environ"))
        if uids is None or uids.real not in users or created is None or created < since:
            continue
        if ENV_SLURM_JOB_MARKER not in (environ or {}):
            continue
        try:
            process.kill()
        except psutil.Error:
            continue
        command = " ".join(process.info["cmdline"] or [])
        killed.append(f"{process.pid}: {users[uids.real]} {command}")
    return killed


def test_pilot(pilot: Pilot, tmp_path: Path) -> None:
    # 1. Each user's script, submitted with MUNGE before any node is idle; fill then starts
    # placeholders.
    job_ids: dict[str, str] = {}
    for user in USERS:
        workdir = user_workdir(pilot, user)
        command = (
            "train.py --checkpoint-dir {checkpoint_dir} --total-samples {total_samples} "
            "--global-batch-size {global_batch_size} "
            f"--record-samples {workdir / 'records'} --pace-file {workdir / 'pace'}"
        )
        submitted = pilot.job_cli(
            user, "submit", "--nodes", f"1:{NODES_PER_JOB}", "--workdir", str(workdir),
            "--command", command, "--total-samples", str(TOTAL_SAMPLES),
            "--global-batch-size", str(GLOBAL_BATCH_SIZE),
            "--env", f"{PILOT_MARKER}={pilot.slurm.root}",
            "--env", f"{ENV_FIRST_STEP_DUMP_S}={STALL_TIMEOUT_S / 2:g}",
        )  # fmt: skip
        pilot.submitted_at = pilot.submitted_at or time.time()
        assert submitted.returncode == 0, submitted.stderr
        job_ids[user] = submitted.stdout.split()[-1]
        pilot.mark(f"{user}'s job {job_ids[user]} submitted with MUNGE (--nodes 1:2)")
    for user, job_id in job_ids.items():
        owner = pilot.api("GET", f"/v1/jobs/{job_id}")["owner"]
        assert owner == {"name": user, "uid": pilot.accounts[user].pw_uid}, owner
    pilot.start_fill()
    everywhere = {user: NODES_PER_JOB for user in USERS}
    held = pilot.wait("world size 2 for each job", lambda: pilot.settled(job_ids, len(NODES)))
    assert held == everywhere
    pilot.mark(f"workers report world size 2 each ({_sizes(pilot, job_ids)})")
    # Each job's workers run as its owner: every uid of theirs is the owner's.
    for user in USERS:
        workers = worker_processes(pilot.slurm.root / "users" / user)
        uid = pilot.accounts[user].pw_uid
        assert len(workers) == NODES_PER_JOB, (user, workers)
        assert workers == {pid: ({uid}, user) for pid in workers}, (user, workers)

    # 2. A batch job of 2 nodes preempts 2 placeholders; it runs until the failover is checked.
    started_file, release_file = tmp_path / "batch-started", tmp_path / "batch-release"
    stamp = "python3 -c 'import time; print(time.time())'"
    batch_submitted_at = time.time()
    batch_id = pilot.slurm.slurm(
        "sbatch", "--parsable", "-p", "batch", "-N", str(BATCH_NODES), "-o", "/dev/null",
        f"--wrap={stamp} > {started_file}.tmp && mv {started_file}.tmp {started_file}; "
        f"timeout {BATCH_MAX_S} sh -c 'until [ -e {release_file} ]; do sleep 0.2; done'",
    ).strip()  # fmt: skip
    pilot.mark(f"batch job {batch_id} submitted ({BATCH_NODES} nodes)", batch_submitted_at)
    started = pilot.wait("the batch job to start", lambda: _read_float(started_file))
    pilot.mark("batch job started", started)
    batch_start_s = started - batch_submitted_at
    assert batch_start_s <= GRACE_S + 2, f"batch job started {batch_start_s:.1f} s after submit"
    left = len(NODES) - BATCH_NODES
    held = pilot.wait(f"the jobs on {left} nodes", lambda: pilot.settled(job_ids, left))
    pilot.mark(f"the jobs hold {left} nodes ({held}; reported {_sizes(pilot, job_ids)})")

    # 3. SIGKILL of the leader replica while the jobs train on 2 nodes.
    before = {user: pilot.api("GET", f"/v1/jobs/{job_id}") for user, job_id in job_ids.items()}
    alive_before = _alive_agents(pilot)
    leader = next(replica for replica in pilot.replicas if replica.leader())
    follower = next(replica for replica in pilot.replicas if replica is not leader)
    leader.kill()
    pilot.mark(f"{leader.name} (leader) killed with SIGKILL")
    pilot.wait(f"{follower.name} to lead", follower.leader, TAKEOVER_TIMEOUT_S)
    pilot.mark(f"{follower.name} leads")
    pilot.replicas = [follower]
    for user, job_id in job_ids.items():
        after = pilot.api("GET", f"/v1/jobs/{job_id}")
        assert _kept(before[user]["rescales"], after["rescales"]), (before[user], after)
        assert after["samples_done"] >= before[user]["samples_done"]
        assert after["state"] == before[user]["state"]

    # 4. The batch job ends; new placeholders start; the jobs grow back to 2 nodes each.
    release_file.touch()
    pilot.wait(
        "the batch job to end",
        lambda: not pilot.slurm.slurm("squeue", "-h", "-j", batch_id, "-o", "%i").strip(),
    )
    pilot.mark("batch job ended")
    held = pilot.wait("world size 2 again", lambda: pilot.settled(job_ids, len(NODES)))
    assert held == everywhere
    pilot.mark(f"workers report world size 2 each again ({_sizes(pilot, job_ids)})")
    # The agents that were alive at the kill stayed so through the failover (none lost).
    assert alive_before <= _alive_agents(pilot) | _left_agents(pilot)
    assert not _lost_agents(pilot), _lost_agents(pilot)

    # 5. The rest of the budgets at full speed, to the end.
    for user in USERS:
        (pilot.slurm.root / "users" / user / "pace").unlink()
    pilot.mark("pace files removed: full speed")
    jobs: dict[str, dict] = {}
    for user, job_id in job_ids.items():
        waited = pilot.job_cli(
            user, "wait", job_id, "--timeout-s", f"{FINISH_TIMEOUT_S:g}", server=follower.url
        )
        assert waited.returncode == 0, (user, waited.stdout, waited.stderr)
        jobs[user] = pilot.api("GET", f"/v1/jobs/{job_id}")
        pilot.mark(f"{user}'s job finished", _timestamp(jobs[user]["finished_at"]))

    for user, job in jobs.items():
        account = pilot.accounts[user]
        # Every index of every epoch trained exactly once, across every rescale.
        assert job["state"] == "finished" and job["samples_done"] >= TOTAL_SAMPLES, job
        records = pilot.slurm.root / "users" / user / "records"
        problems = coverage_problems(read_records(records), 512, TOTAL_SAMPLES // 512)
        assert not problems, (user, problems[:10])
        # The final model: the owner's, and loadable into the script's model.
        final = Path(job["job_dir"]) / "final" / "model.pt"
        assert final.stat().st_uid == account.pw_uid, (user, final.stat())
        model = torch.nn.Linear(8, 2)
        model.load_state_dict(torch.load(final, weights_only=True))
        # Every generation that trained is in the rank 0 log that `interstice job logs` shows
        # its owner.
        logs = pilot.job_cli(
            user, "logs", job["job_id"], "--rank", "0", "--tail", "100000", server=follower.url
        )
        assert logs.returncode == 0, (user, logs.stderr)
        started_sizes = [
            int(line.split("world_size=")[1].split()[0])
            for line in logs.stdout.splitlines()
            if line.startswith("generation start:")
        ]
        reported = pilot.world_sizes(job["job_id"])
        assert _merged(started_sizes) == reported, (user, started_sizes, reported)
        assert reported[-1] == NODES_PER_JOB, (user, reported)
        measured = [r for r in job["rescales"] if r["cost_s"] is not None]
        assert len(started_sizes) >= len(measured), (user, started_sizes, job["rescales"])
    # The preemption took nodes from the jobs: their agents left (the Epilog) or the nodes
    # were reclaimed.
    rescales = [r for job in jobs.values() for r in job["rescales"]]
    preempted = [r for r in rescales if r["reason"] in ("agent_left", "reclaim")]
    assert any(len(r["to_nodes"]) < len(r["from_nodes"]) for r in preempted), rescales

    pilot.print_timeline(jobs)


def _kept(before: list[dict], after: list[dict]) -> bool:
    """Whether ``after`` starts with every rescale of ``before``, each as it was but for a cost
    measured since (a generation's cost ends at its second report)."""
    return len(after) >= len(before) and all(
        a == b or (b["cost_s"] is None and {**a, "cost_s": None} == b)
        for b, a in zip(before, after[: len(before)], strict=True)
    )


def _sizes(pilot: Pilot, job_ids: dict[str, str]) -> str:
    return ", ".join(f"{user} {pilot.world_sizes(job_id)}" for user, job_id in job_ids.items())


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
