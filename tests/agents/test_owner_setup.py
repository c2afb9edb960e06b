"""What an agent does for the jobs of owners before it runs one: it says at registration that
it runs jobs as their owners (only as root), and it makes the owner's folder in the checkpoint
root, ``<checkpoint_root>/<user>``, when the admin did not: 0700 and the owner's, only in a
checkpoint root no one but root may change, never through a link.

The folder tests create the Unix accounts alice and bob (removed afterwards) and need root.
"""

import os
import pwd
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from interstice.agents import user_folder
from interstice.agents.launch_config import NodeSettings
from interstice.agents.launcher import Launcher
from interstice.agents.owner import Account, job_account
from interstice.agents.protocol import BadCommand, CommandOwner, parse_command
from interstice.agents.stopping import end_generation, kill
from interstice.agents.user_folder import ensure_user_folder
from test_agent_commands import FakeService, make_agent
from test_run_as_owner import PROBE, start_command
from unix_accounts import owner_accounts, shared_folder

from interstice.ports import free_ports

# -- the registration ------------------------------------------------------------------------


def registration(tmp_path: Path) -> dict:
    service = FakeService()
    make_agent(tmp_path, service)
    ((method, path, body), *_) = service.requests
    assert (method, path) == ("POST", "/v1/agents")
    return body


def test_a_root_agent_says_it_runs_jobs_as_their_owners(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert registration(tmp_path)["runs_as_owner"] is True


def test_an_agent_of_another_account_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    assert "runs_as_owner" not in registration(tmp_path)  # a service reads it as false


# -- the owner's folder in the checkpoint root -----------------------------------------------


@pytest.fixture(scope="module")
def accounts() -> Iterator[dict[str, pwd.struct_passwd]]:
    with owner_accounts() as created:
        yield created


@pytest.fixture
def bare(accounts: dict[str, pwd.struct_passwd]) -> Iterator[Path]:
    """A shared folder whose checkpoint root (root's 0755) has no folder per user."""
    with shared_folder(accounts, user_folders=False) as root:
        yield root


def owner(accounts: dict[str, pwd.struct_passwd], name: str) -> Account:
    account = job_account(CommandOwner(name=name, uid=accounts[name].pw_uid), "n0")
    assert account is not None
    return account


def job_dir(root: Path, user: str) -> str:
    return str(root / "checkpoints" / user / "j-1")


def test_a_missing_folder_is_made_0700_for_the_owner(
    bare: Path, accounts: dict[str, pwd.struct_passwd]
) -> None:
    alice = owner(accounts, "alice")
    assert ensure_user_folder(job_dir(bare, "alice"), alice, "n0") is True
    made = (bare / "checkpoints" / "alice").lstat()
    assert stat.S_ISDIR(made.st_mode) and stat.S_IMODE(made.st_mode) == 0o700
    assert (made.st_uid, made.st_gid) == (alice.uid, alice.gid)
    assert not (bare / "checkpoints" / "alice" / "j-1").exists()  # the owner's to make
    assert ensure_user_folder(job_dir(bare, "alice"), alice, "n0") is False  # found


def test_the_owners_first_job_starts_without_a_folder_the_admin_made(
    bare: Path, accounts: dict[str, pwd.struct_passwd]
) -> None:
    (bare / "code" / "probe.py").write_text(PROBE)
    (bare / "code" / "probe.py").chmod(0o644)
    ports = free_ports(2)
    launcher = Launcher(
        NodeSettings(workdir=bare / "agent", node="n0", host="127.0.0.1", ports=ports)
    )
    alice = accounts["alice"]
    who = {"name": "alice", "uid": alice.pw_uid}
    command = parse_command(start_command(bare, "j-first", who, ports[0]))
    generation = launcher.launch(command)
    try:
        job = bare / "checkpoints" / "alice" / "j-first"
        deadline = time.monotonic() + 300
        while not (job / "identity-0.json").exists():
            if generation.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the probe did not run: {generation.log_tail(3000)}")
            time.sleep(0.2)
        for folder in (job.parent, job):
            status = folder.lstat()
            assert (status.st_uid, stat.S_IMODE(status.st_mode)) == (alice.pw_uid, 0o700)
        end_generation(generation, time.monotonic() + 30)
    finally:
        kill(generation.process)
        launcher.close_spare()


def test_a_link_planted_at_the_folder_is_refused_and_its_target_untouched(
    bare: Path, accounts: dict[str, pwd.struct_passwd]
) -> None:
    target = bare / "elsewhere"
    target.mkdir(mode=0o755)
    (bare / "checkpoints" / "alice").symlink_to(target)
    with pytest.raises(BadCommand) as refused:
        ensure_user_folder(job_dir(bare, "alice"), owner(accounts, "alice"), "n0")
    assert not refused.value.job_failed  # the node's fault: the job goes elsewhere
    assert str(refused.value) == (
        f"node n0: {str(bare / 'checkpoints' / 'alice')!r} is a link: "
        "the owner's folder must be a real folder"
    )
    assert target.stat().st_uid == 0 and stat.S_IMODE(target.stat().st_mode) == 0o755


def test_a_folder_of_another_account_is_refused(
    bare: Path, accounts: dict[str, pwd.struct_passwd]
) -> None:
    folder = bare / "checkpoints" / "alice"
    folder.mkdir(mode=0o700)
    bob = accounts["bob"]
    os.chown(folder, bob.pw_uid, bob.pw_gid)
    with pytest.raises(BadCommand, match=f"belongs to uid {bob.pw_uid}, not to alice"):
        ensure_user_folder(job_dir(bare, "alice"), owner(accounts, "alice"), "n0")
    assert folder.stat().st_uid == bob.pw_uid


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_a_checkpoint_root_others_may_write_gets_no_folder(
    bare: Path, accounts: dict[str, pwd.struct_passwd], mode: int
) -> None:
    (bare / "checkpoints").chmod(mode)
    with pytest.raises(BadCommand, match="only in a checkpoint root that belongs to root") as e:
        ensure_user_folder(job_dir(bare, "alice"), owner(accounts, "alice"), "n0")
    assert not e.value.job_failed
    assert f"mode {mode:04o}" in str(e.value)
    assert not (bare / "checkpoints" / "alice").exists()


def test_a_checkpoint_root_of_another_account_or_in_a_shared_folder_gets_no_folder(
    bare: Path, accounts: dict[str, pwd.struct_passwd]
) -> None:
    alice, bob = owner(accounts, "alice"), accounts["bob"]
    os.chown(bare / "checkpoints", bob.pw_uid, bob.pw_gid)
    with pytest.raises(BadCommand, match=f"is uid {bob.pw_uid}, mode 0755"):
        ensure_user_folder(job_dir(bare, "alice"), alice, "n0")
    os.chown(bare / "checkpoints", 0, 0)
    bare.chmod(0o777)  # bob could swap the checkpoint root for a folder of his
    with pytest.raises(BadCommand, match="which another account than root may change"):
        ensure_user_folder(job_dir(bare, "alice"), alice, "n0")
    assert not (bare / "checkpoints" / "alice").exists()


def test_a_folder_the_admin_made_serves_in_any_checkpoint_root(
    accounts: dict[str, pwd.struct_passwd],
) -> None:
    with shared_folder(accounts) as share:  # the admin's 0700 folder per user
        (share / "checkpoints").chmod(0o1777)
        assert ensure_user_folder(job_dir(share, "alice"), owner(accounts, "alice"), "n0") is False


def test_a_folder_another_agent_is_making_is_given_to_the_owner(
    bare: Path, accounts: dict[str, pwd.struct_passwd], monkeypatch: pytest.MonkeyPatch
) -> None:
    make = os.mkdir

    def raced(path: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        make(path, 0o755, dir_fd=dir_fd)  # another node's agent, not yet given to alice
        raise FileExistsError(path)

    monkeypatch.setattr(user_folder.os, "mkdir", raced)
    alice = owner(accounts, "alice")
    assert ensure_user_folder(job_dir(bare, "alice"), alice, "n0") is True
    status = (bare / "checkpoints" / "alice").stat()
    assert (status.st_uid, stat.S_IMODE(status.st_mode)) == (alice.uid, 0o700)


def test_nothing_is_made_for_a_job_directory_elsewhere_or_a_job_without_owner(
    bare: Path, accounts: dict[str, pwd.struct_passwd]
) -> None:
    alice = owner(accounts, "alice")
    assert ensure_user_folder(job_dir(bare, "projects"), alice, "n0") is False
    assert ensure_user_folder(job_dir(bare, "alice"), None, "n0") is False
    assert list((bare / "checkpoints").iterdir()) == []
