"""MUNGE credentials against a real munged (a key and socket of its own) and throw-away Unix
accounts: a valid credential is its user, with the ``user`` role, and owns the jobs it submits;
a forged, expired, replayed or garbage one, one of root or of a system account, and one of a
deleted account answer 401 with the reason and go to the audit log; munged stopped answers 503
and creates nothing. Users see and act on their own jobs only, by MUNGE or by a token bound to
their account; admins see all. In multi-user mode the service never creates a job's folder
and reads its logs only through files of the owner's."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import Api
from munge_daemon import (  # noqa: F401 (the fixtures alice and daemon)
    MungeDaemon,
    alice_fixture,
    daemon_fixture,
    munged,
    remove_account,
    start_munged,
    unix_account,
)
from typer.testing import CliRunner

from interstice.cli import app

JOB = {"model": "tinycnn", "min_nodes": 1, "max_nodes": 2, "total_samples": 10**6}


@pytest.fixture(scope="module")
def bob() -> Iterator[pwd.struct_passwd]:
    with unix_account("bob") as account:
        yield account


@pytest.fixture
def api(make_api: Callable[..., Any], daemon: MungeDaemon) -> Iterator[Api]:
    """A multi-user service that takes MUNGE credentials from ``daemon``."""
    with make_api(auth_munge=True, munge_socket=daemon.socket, multi_user=True) as running:
        yield running


def as_munge(
    api: Api, daemon: MungeDaemon, user: str | None, method: str, path: str, **kwargs: Any
) -> Any:
    """One request with a fresh credential of ``user`` (None: root)."""
    headers = {"Authorization": f"MUNGE {daemon.credential(user)}"}
    return api.client.request(method, path, headers=headers, **kwargs)


def munge_refusals(api: Api) -> list[dict[str, Any]]:
    """The audit log's refused MUNGE credentials, newest first."""
    r = api.call("GET", "/v1/audit", "admin")
    assert r.status_code == 200, r.text
    entries = r.json()["data"]
    return [
        e["new"]
        for e in entries
        if e["action"] == "request.refused" and e["new"].get("auth") == "munge"
    ]


def test_a_valid_credential_submits_a_job_its_user_owns(api: Api, daemon, alice) -> None:
    r = as_munge(api, daemon, alice.pw_name, "POST", "/v1/jobs", json=JOB)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["owner"] == {"name": alice.pw_name, "uid": alice.pw_uid}
    root = api.settings.checkpoint_root.resolve()
    assert job["job_dir"] == str(root / alice.pw_name / job["job_id"])
    # the owner's processes create it on the nodes; the service writes nothing there
    assert not (root / alice.pw_name).exists()
    r = as_munge(api, daemon, alice.pw_name, "GET", f"/v1/jobs/{job['job_id']}")
    assert r.status_code == 200 and r.json()["owner"]["uid"] == alice.pw_uid


def test_a_munge_user_has_the_user_role_only(api: Api, daemon, alice) -> None:
    r = as_munge(api, daemon, alice.pw_name, "GET", "/v1/tokens")
    assert r.status_code == 401  # admin routes take no MUNGE credential at all
    r = as_munge(api, daemon, alice.pw_name, "GET", "/v1/scalability")
    assert r.status_code == 200, r.text


def test_garbage_answers_401_with_the_reason_and_is_audited(api: Api) -> None:
    r = api.client.get("/v1/jobs", headers={"Authorization": "MUNGE garbage"})
    assert r.status_code == 401
    assert r.json()["detail"].startswith("MUNGE credential refused: ")
    assert r.headers["WWW-Authenticate"] == "MUNGE"
    (entry,) = munge_refusals(api)
    assert entry["uid"] is None and entry["path"] == "/v1/jobs"
    assert entry["reason"] in r.json()["detail"]


def test_a_replayed_credential_answers_401(api: Api, daemon, alice) -> None:
    header = {"Authorization": f"MUNGE {daemon.credential(alice.pw_name)}"}
    assert api.client.get("/v1/jobs", headers=header).status_code == 200
    r = api.client.get("/v1/jobs", headers=header)
    assert r.status_code == 401
    assert r.json()["detail"] == "MUNGE credential refused: Replayed credential"
    (entry,) = munge_refusals(api)
    assert (entry["uid"], entry["reason"]) == (alice.pw_uid, "Replayed credential")


def test_an_expired_credential_answers_401(api: Api, daemon, alice) -> None:
    credential = daemon.credential(alice.pw_name, ttl_s=1)
    time.sleep(2.5)  # past the 1 s TTL (munged counts whole seconds)
    r = api.client.get("/v1/jobs", headers={"Authorization": f"MUNGE {credential}"})
    assert r.status_code == 401
    assert r.json()["detail"] == "MUNGE credential refused: Expired credential"
    assert munge_refusals(api)[0]["reason"] == "Expired credential"


def test_a_credential_of_another_key_is_forged(api: Api, alice) -> None:
    folder = Path(tempfile.mkdtemp(prefix="interstice-munge-other-"))
    try:
        with munged(folder) as other:
            forged = other.credential(alice.pw_name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    r = api.client.get("/v1/jobs", headers={"Authorization": f"MUNGE {forged}"})
    assert r.status_code == 401
    assert r.json()["detail"] == "MUNGE credential refused: Invalid credential"
    assert munge_refusals(api)[0]["reason"] == "Invalid credential"


def test_root_answers_401(api: Api, daemon) -> None:
    r = as_munge(api, daemon, None, "POST", "/v1/jobs", json=JOB)
    assert r.status_code == 401
    assert r.json()["detail"] == "MUNGE credential refused: uid 0 (root) may not own jobs"
    assert munge_refusals(api)[0]["uid"] == 0


def test_a_uid_below_the_minimum_answers_401(api: Api, daemon) -> None:
    with unix_account("svc", system=True) as system:
        assert system.pw_uid < api.settings.munge_min_uid
        r = as_munge(api, daemon, system.pw_name, "GET", "/v1/jobs")
    assert r.status_code == 401
    assert "below the minimum uid 1000" in r.json()["detail"]
    assert munge_refusals(api)[0]["uid"] == system.pw_uid


def test_a_deleted_account_answers_401(api: Api, daemon) -> None:
    with unix_account("gone") as gone:
        credential = daemon.credential(gone.pw_name)
        remove_account(gone.pw_name)
    r = api.client.get("/v1/jobs", headers={"Authorization": f"MUNGE {credential}"})
    assert r.status_code == 401
    assert r.json()["detail"] == (
        f"MUNGE credential refused: uid {gone.pw_uid} has no account on the service host"
    )
    assert munge_refusals(api)[0]["uid"] == gone.pw_uid


def test_munged_stopped_answers_503_and_creates_nothing(api: Api, daemon, alice) -> None:
    credential = daemon.credential(alice.pw_name)
    key = (daemon.folder / "munge.key").read_bytes()
    daemon.stop()
    r = api.client.post("/v1/jobs", json=JOB, headers={"Authorization": f"MUNGE {credential}"})
    assert r.status_code == 503
    assert r.json()["detail"].startswith("MUNGE credentials cannot be checked now (munged")
    assert api.call("GET", "/v1/jobs", "admin").json()["count"] == 0
    assert munge_refusals(api) == []  # the caller did nothing wrong
    start_munged(daemon.folder, key=key)  # back, with the same key: the same credential works
    r = api.client.post("/v1/jobs", json=JOB, headers={"Authorization": f"MUNGE {credential}"})
    assert r.status_code == 201, r.text
    assert r.json()["job_id"] == "j-1"


def test_users_see_and_cancel_their_own_jobs_only(api: Api, daemon, alice, bob) -> None:
    mine = as_munge(api, daemon, alice.pw_name, "POST", "/v1/jobs", json=JOB).json()
    theirs = as_munge(api, daemon, bob.pw_name, "POST", "/v1/jobs", json=JOB).json()
    listed = as_munge(api, daemon, alice.pw_name, "GET", "/v1/jobs").json()
    assert [j["job_id"] for j in listed["data"]] == [mine["job_id"]]
    for method, path in (
        ("GET", f"/v1/jobs/{theirs['job_id']}"),
        ("DELETE", f"/v1/jobs/{theirs['job_id']}"),
        ("GET", f"/v1/jobs/{theirs['job_id']}/logs"),
        ("GET", f"/v1/jobs/{theirs['job_id']}/metrics"),
    ):
        r = as_munge(api, daemon, alice.pw_name, method, path)
        assert (r.status_code, r.json()["detail"]) == (404, f"job {theirs['job_id']} not found")
    assert api.job(theirs["job_id"], "admin")["state"] == "queued"
    r = as_munge(api, daemon, alice.pw_name, "DELETE", f"/v1/jobs/{mine['job_id']}")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    everyone = api.call("GET", "/v1/jobs", "admin").json()["data"]
    assert {j["owner"]["name"] for j in everyone} == {alice.pw_name, bob.pw_name}


def test_a_token_bound_to_an_account_acts_as_it(api: Api, daemon, alice) -> None:
    body = {"name": "alice-laptop", "role": "user", "unix_user": alice.pw_name}
    r = api.call("POST", "/v1/tokens", "admin", json=body)
    assert r.status_code == 201, r.text
    created = r.json()
    assert (created["unix_user"], created["unix_uid"]) == (alice.pw_name, alice.pw_uid)
    bound = {"Authorization": f"Bearer {created['token']}"}
    by_munge = as_munge(api, daemon, alice.pw_name, "POST", "/v1/jobs", json=JOB).json()
    r = api.client.post("/v1/jobs", json=JOB, headers=bound)
    assert r.status_code == 201, r.text
    by_token = r.json()
    assert by_token["owner"] == {"name": alice.pw_name, "uid": alice.pw_uid}
    # one owner, whichever way each job came in
    listed = api.client.get("/v1/jobs", headers=bound).json()["data"]
    assert {j["job_id"] for j in listed} == {by_munge["job_id"], by_token["job_id"]}
    listed = as_munge(api, daemon, alice.pw_name, "GET", "/v1/jobs").json()["data"]
    assert {j["job_id"] for j in listed} == {by_munge["job_id"], by_token["job_id"]}
    # the MUNGE principal is no token
    tokens = api.call("GET", "/v1/tokens", "admin").json()["data"]
    assert alice.pw_name not in {t["name"] for t in tokens}
    assert {t["unix_user"] for t in tokens if t["name"] == "alice-laptop"} == {alice.pw_name}


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"role": "user"}, "a user token must be bound to a Unix account in multi-user mode"),
        ({"role": "user", "unix_user": "no-such-user-x"}, "no account 'no-such-user-x'"),
        ({"role": "user", "unix_user": "root"}, "uid 0 (root) may not own jobs"),
        ({"role": "agent", "unix_uid": 4242, "unix_user": "x"}, "only user and admin tokens"),
    ],
)
def test_a_token_binding_is_checked(api: Api, fields: dict, detail: str) -> None:
    r = api.call("POST", "/v1/tokens", "admin", json={"name": "t", **fields})
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"][0] == "body" and error["loc"][1] in ("unix_user", "unix_uid")
    assert detail in error["msg"]


def test_an_unbound_token_cannot_submit_in_multi_user_mode(api: Api) -> None:
    r = api.call("POST", "/v1/jobs", "user", json=JOB)
    assert r.status_code == 409
    assert "multi-user mode: a job runs as a Unix account" in r.json()["detail"]


def test_munge_is_refused_when_it_is_off(make_api: Callable[..., Any], daemon, alice) -> None:
    with make_api() as api:
        r = as_munge(api, daemon, alice.pw_name, "GET", "/v1/jobs")
    assert r.status_code == 401
    assert "INTERSTICE_AUTH_MUNGE is off" in r.json()["detail"]


def test_logs_are_read_only_through_the_owners_files(api: Api, daemon, alice, tmp_path) -> None:
    job = as_munge(api, daemon, alice.pw_name, "POST", "/v1/jobs", json=JOB).json()
    folder = Path(job["job_dir"])
    generation = folder / "logs" / "r-g1"
    generation.mkdir(parents=True)
    root = api.settings.checkpoint_root.resolve()
    for made in (root / alice.pw_name, folder, folder / "logs", generation):
        os.chown(made, alice.pw_uid, alice.pw_gid)  # as the owner's processes make them
    log = generation / "rank-0.log"
    log.write_text("step 1\n")
    os.chown(log, alice.pw_uid, alice.pw_gid)

    def read() -> Any:
        return as_munge(api, daemon, alice.pw_name, "GET", f"/v1/jobs/{job['job_id']}/logs")

    assert read().json()["text"] == "step 1\n"
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    log.unlink()
    log.symlink_to(secret)  # a symbolic link planted by the owner
    assert read().status_code == 404
    log.unlink()
    os.link(secret, log)  # a hard link: a file of root's
    assert read().status_code == 404
    log.unlink()
    shutil.rmtree(folder / "logs")
    (tmp_path / "elsewhere" / "r-g1").mkdir(parents=True)
    (tmp_path / "elsewhere" / "r-g1" / "rank-0.log").write_text("root's\n")
    (folder / "logs").symlink_to(tmp_path / "elsewhere")  # a linked folder
    assert read().status_code == 404


def test_token_create_binds_a_token_on_the_command_line(
    alice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'i.db'}"]
    runner = CliRunner()
    created = runner.invoke(app, ["token", "create", "--role", "user", "--name", "laptop",
                                  "--unix-user", alice.pw_name, *db])  # fmt: skip
    assert created.exit_code == 0, created.output
    listed = runner.invoke(app, ["token", "list", *db])
    assert "name=laptop role=user" in listed.stdout
    assert listed.stdout.rstrip().endswith(f"unix={alice.pw_name}")
    monkeypatch.setenv("INTERSTICE_MULTI_USER", "true")
    unbound = runner.invoke(app, ["token", "create", "--role", "user", *db])
    assert unbound.exit_code == 2
    assert unbound.stderr.strip() == (
        "error: --unix-user: a user token must be bound to a Unix account in multi-user mode"
    )
