"""Two users' jobs on two nodes of one machine, each run as its owner: alice's job attacks
bob's, and every attempt fails.

Timeline (two node agents' launchers, n0 and n1, driven with the commands a service sends in
multi-user mode, each job naming its owner):

1. bob's job (``examples/train_digits.py``, recording every sample it trains) starts on n0
   as generation g1; once it reported a step, it is stopped (stop file and SIGTERM: it
   checkpoints and exits), as at a rescale.
2. n0 keeps a spare launcher for bob, the owner of its last job; g2 of bob's job starts on it
   and resumes from the checkpoint.
3. While bob's workers train, alice's job starts on n1. Her script tries to read bob's
   checkpoint, overwrite his final model and SIGKILL every process of bob's it finds in
   /proc, writes what each attempt gave in her job directory, and exits 0.
4. bob's job runs to its end.

Then: each of alice's attempts failed with EACCES or EPERM and her job recorded it; ``ps``
showed each job's processes under its owner's uid; bob's job finished, trained every sample
of every complete epoch exactly once across its two generations, and its final model loads
whole.
"""

import json
import pwd
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from installed import skip_unless_installed

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[train])")
skip_unless_installed("sklearn", reason="scikit-learn is not installed (pip install -e .[train])")

import torch  # noqa: E402
from exactly_once import coverage_problems, read_records  # noqa: E402
from interstice.agents import outcome, rundir  # noqa: E402
from interstice.agents.generation import Generation, workers_alive  # noqa: E402
from interstice.agents.launch_config import NodeSettings  # noqa: E402
from interstice.agents.launcher import Launcher  # noqa: E402
from interstice.agents.owner import job_account  # noqa: E402
from interstice.agents.protocol import CommandOwner, parse_command  # noqa: E402
from interstice.agents.stopping import end_generation, kill  # noqa: E402
from unix_accounts import owner_accounts, shared_folder  # noqa: E402

from interstice import wire  # noqa: E402
from interstice.ports import free_ports  # noqa: E402

EXAMPLES = Path(__file__).parents[2] / "examples"
DIGITS_TRAIN_LEN = 1437  # 80 % of scikit-learn's 1,797 digits
TOTAL_SAMPLES = 20 * DIGITS_TRAIN_LEN
STEP_TIMEOUT_S = 300.0  # a fresh launcher on a loaded 2-core machine: torch's imports
ATTACK = """
import errno, json, os, signal
from pathlib import Path

bob_dir, bob_uid = Path(os.environ["BOB_JOB_DIR"]), int(os.environ["BOB_UID"])
attempts = {}


def attempt(what, action):
    try:
        action()
        attempts[what] = "done"
    except OSError as error:
        attempts[what] = errno.errorcode[error.errno]


def read_checkpoint():
    with open(bob_dir / "checkpoints" / "checkpoint.pt", "rb") as file:
        file.read()


def overwrite_final_model():
    with open(bob_dir / "final" / "model.pt", "wb") as file:
        file.write(b"alice was here")


attempt("read checkpoint", read_checkpoint)
attempt("overwrite final model", overwrite_final_model)
pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
for pid in [pid for pid in pids if os.stat(f"/proc/{pid}").st_uid == bob_uid]:
    attempt(f"SIGKILL {pid}", lambda: os.kill(pid, signal.SIGKILL))
Path(os.environ["INTERSTICE_JOB_DIR"], "attempts.json").write_text(json.dumps(attempts))
print("attempts:", json.dumps(attempts), flush=True)
"""


@pytest.fixture(scope="module")
def accounts() -> Iterator[dict[str, pwd.struct_passwd]]:
    with owner_accounts() as created:
        yield created


def start(
    share: Path, owner: pwd.struct_passwd, job_id: str, generation: int, port: int, **job: Any
) -> Any:
    job_dir = share / "checkpoints" / owner.pw_name / job_id
    return parse_command(
        {
            "command_id": generation,
            "kind": "start",
            "job_id": job_id,
            "world_size": 1,
            "rendezvous_endpoint": f"127.0.0.1:{port}",
            "rendezvous_id": f"{job_id}-g{generation}",
            "job": {
                "global_batch_size": 64,
                "total_samples": TOTAL_SAMPLES,
                "min_nodes": 1,
                "max_nodes": 1,
                "job_dir": str(job_dir),
                "checkpoint_dir": str(wire.checkpoint_dir(job_dir)),
                "owner": {"name": owner.pw_name, "uid": owner.pw_uid},
                **job,
            },
        }
    )


def wait(condition: Any, what: str, generations: list[Generation], timeout_s: float) -> None:
    """Wait for ``condition()``, failing with the launchers' log tails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {g.rendezvous_id}\n{g.log_tail(2000)}" for g in generations)
            pytest.fail(f"no {what} in {timeout_s:.0f} s:\n{tails}")
        time.sleep(0.1)


def stepped(generation: Generation) -> bool:
    """Whether the generation's workers reported a step (their progress files)."""
    return any(
        progress.get("rendezvous_id") == generation.rendezvous_id
        for progress in rundir.read_progress(generation.run_dir, generation.uid)
    )


def ps_users(generation: Generation) -> set[str]:
    """The user names ``ps`` shows for the generation's launcher and every process below."""
    pids = [generation.process.pid]
    try:
        pids += [child.pid for child in psutil.Process(pids[0]).children(recursive=True)]
    except psutil.Error:
        pass
    shown = subprocess.run(
        ["ps", "-o", "user=", "-p", ",".join(map(str, pids))], capture_output=True, text=True
    )
    return set(shown.stdout.split())


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_alices_job_can_neither_read_nor_overwrite_nor_signal_bobs(
    accounts: dict[str, pwd.struct_passwd],
) -> None:
    alice, bob = accounts["alice"], accounts["bob"]
    with shared_folder(accounts) as share:
        (share / "code" / "attack.py").write_text(ATTACK)
        ports = {node: free_ports(2) for node in ("n0", "n1")}
        launchers = {
            node: Launcher(
                NodeSettings(
                    workdir=share / f"agent-{node}", node=node, host="127.0.0.1", ports=ports[node]
                )
            )
            for node in ("n0", "n1")
        }
        bob_job = {
            "command": [
                str(EXAMPLES / "train_digits.py"),
                *("--record-samples", "{job_dir}/records"),
            ]
        }
        bob_dir = share / "checkpoints" / "bob" / "j-bob"
        running: list[Generation] = []
        try:
            # 1. bob's g1, stopped after its first reported step.
            g1 = launchers["n0"].launch(start(share, bob, "j-bob", 1, ports["n0"][0], **bob_job))
            running.append(g1)
            wait(lambda: stepped(g1), "step of bob's g1", running, STEP_TIMEOUT_S)
            assert ps_users(g1) == {"bob"}
            end_generation(g1, time.monotonic() + 60)
            assert (wire.checkpoint_dir(bob_dir) / "checkpoint.pt").is_file()

            # 2. a spare launcher for bob, then g2 on it; alice's spare on n1 meanwhile.
            launchers["n0"].warm(last=True)
            launchers["n1"].warm(job_account(CommandOwner(name="alice", uid=alice.pw_uid), "n1"))
            for launcher in launchers.values():
                assert launcher.wait_ready(STEP_TIMEOUT_S)
            g2 = launchers["n0"].launch(start(share, bob, "j-bob", 2, ports["n0"][1], **bob_job))
            running.append(g2)
            wait(lambda: workers_alive(g2), "workers of bob's g2", running, STEP_TIMEOUT_S)
            bob_users = ps_users(g2)

            # 3. alice's attack, while bob's workers train.
            attack = start(
                share,
                alice,
                "j-alice",
                1,
                ports["n1"][0],
                command=[str(share / "code" / "attack.py")],
                env={"BOB_JOB_DIR": str(bob_dir), "BOB_UID": str(bob.pw_uid)},
            )
            g_alice = launchers["n1"].launch(attack)
            running.append(g_alice)
            alice_users = ps_users(g_alice)
            bob_alive_during_attack = workers_alive(g2)
            wait(lambda: g_alice.process.poll() is not None, "end of alice's job", running, 300)

            # 4. bob's job to its end.
            wait(lambda: g2.process.poll() is not None, "end of bob's job", running, 900)
        finally:
            for generation in running:
                kill(generation.process)
            for launcher in launchers.values():
                launcher.close_spare()

        assert alice_users == {"alice"} and bob_users == {"bob"}
        assert bob_alive_during_attack
        assert outcome.judge(g_alice) == outcome.Outcome("finished")
        alice_dir = share / "checkpoints" / "alice" / "j-alice"
        attempts = json.loads((alice_dir / "attempts.json").read_text())
        signals = {what: result for what, result in attempts.items() if what.startswith("SIGKILL")}
        assert attempts["read checkpoint"] == "EACCES", attempts
        assert attempts["overwrite final model"] == "EACCES", attempts
        assert signals and set(signals.values()) == {"EPERM"}, attempts

        assert outcome.judge(g2) == outcome.Outcome("finished"), g2.log_tail(3000)
        pairs = read_records(bob_dir / "records")
        assert len(pairs) >= TOTAL_SAMPLES
        problems = coverage_problems(pairs, DIGITS_TRAIN_LEN, len(pairs) // DIGITS_TRAIN_LEN)
        assert not problems, problems[:10]
        final = torch.load(wire.final_dir(bob_dir) / wire.FINAL_MODEL_FILE, weights_only=True)
        assert final and all(torch.isfinite(tensor).all() for tensor in final.values())
