"""Bearer tokens: the admin API and the ``interstice token`` commands create, list and
revoke them; an expired or revoked token answers 401 at once in the process that revoked
it and within the cache's TTL in another; creations, revocations and refused requests are
audited by token id."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from api_helpers import Api
from interstice.api.auth import tokens
from interstice.api.store.db import Database, upgrade
from interstice.api.store.tables import AuditEntry, Token, utcnow
from typer.testing import CliRunner, Result

from interstice.cli import app


def _audit(api: Api) -> list[dict]:
    r = api.call("GET", "/v1/audit", "admin")
    assert r.status_code == 200, r.text
    return r.json()["data"]


def test_admin_creates_lists_and_revokes_a_token(api: Api) -> None:
    created = api.call(
        "POST",
        "/v1/tokens",
        "admin",
        json={"name": "ci-runner", "role": "user", "expires_in_s": 3600},
    )
    assert created.status_code == 201, created.text
    body = created.json()
    token_id, secret = body["token_id"], body["token"]
    assert body["name"] == "ci-runner" and body["role"] == "user" and body["revoked_at"] is None
    assert 3599 <= (_parse(body["expires_at"]) - _parse(body["created_at"])).total_seconds()
    mine = {"Authorization": f"Bearer {secret}"}
    assert api.client.get("/v1/jobs", headers=mine).status_code == 200

    listed = api.call("GET", "/v1/tokens", "admin").json()
    row = next(t for t in listed["data"] if t["token_id"] == token_id)
    assert "token" not in row and secret not in str(listed)

    revoked = api.call("DELETE", f"/v1/tokens/{token_id}", "admin")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    refused = api.client.get("/v1/jobs", headers=mine)  # at once, though it was cached
    assert (refused.status_code, refused.json()) == (
        401,
        {"detail": f"bearer token {token_id} is revoked"},
    )
    again = api.call("DELETE", f"/v1/tokens/{token_id}", "admin")  # idempotent
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]

    entries = {e["action"]: e for e in reversed(_audit(api))}  # the newest of each action
    admin_id = entries["token.create"]["token_id"]
    assert admin_id.startswith("t-") and entries["token.create"]["new"]["token_id"] == token_id
    assert entries["token.revoke"]["token_id"] == admin_id
    assert entries["token.revoke"]["new"]["token_id"] == token_id
    refusal = entries["request.refused"]
    assert refusal["token_id"] == token_id
    assert refusal["new"] | {"refused_since_last_entry": 1} == {
        "token_id": token_id,
        "reason": "revoked",
        "method": "GET",
        "path": "/v1/jobs",
        "refused_since_last_entry": 1,
    }


def test_an_expired_token_answers_401_and_is_audited(api: Api) -> None:
    db = api.app.state.service.db
    secret = tokens.create_token(db, "user", "short-lived", expires_in_s=3600)
    with db.write() as session:
        row = session.query(Token).filter_by(name="short-lived").one()
        row.expires_at = utcnow() - timedelta(seconds=1)
        token_id = f"t-{row.id}"
    answer = api.client.get("/v1/jobs", headers={"Authorization": f"Bearer {secret}"})
    assert (answer.status_code, answer.json()["detail"]) == (
        401,
        f"bearer token {token_id} is expired",
    )
    assert any(
        e["action"] == "request.refused" and e["new"]["reason"] == "expired" for e in _audit(api)
    )


def test_a_wrong_role_is_audited_by_token_id(api: Api) -> None:
    assert api.call("GET", "/v1/tokens", "user").status_code == 403
    (entry,) = [e for e in _audit(api) if e["action"] == "request.refused"]
    assert entry["actor"] == "user-1"
    assert entry["new"]["reason"] == "role" and entry["new"]["path"] == "/v1/tokens"


def test_refusals_of_one_token_are_audited_at_most_once_per_period(api: Api) -> None:
    for _ in range(5):
        assert api.call("GET", "/v1/tokens", "user").status_code == 403
    assert len([e for e in _audit(api) if e["action"] == "request.refused"]) == 1


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a b", "role": "user"}, "name"),
        ({"name": "x" * 201, "role": "user"}, "name"),
        ({"name": "ok", "role": "root"}, "role"),
        ({"name": "ok", "role": "user", "expires_in_s": 0}, "expires_in_s"),
        ({"name": "ok", "role": "user", "expires_in_s": True}, "expires_in_s"),
        ({"name": "ok", "role": "user", "expires_in_s": 1.5}, "expires_in_s"),
    ],
)
def test_a_bad_token_request_is_422_naming_the_field(api: Api, body: dict, field: str) -> None:
    r = api.call("POST", "/v1/tokens", "admin", json=body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][:2] == ["body", field]


def test_revoking_an_unknown_token_is_404(api: Api) -> None:
    r = api.call("DELETE", "/v1/tokens/t-99999", "admin")
    assert (r.status_code, r.json()) == (404, {"detail": "token t-99999 not found"})
    assert api.call("DELETE", "/v1/tokens/99", "admin").status_code == 422


def test_a_revocation_elsewhere_is_seen_within_the_cache_ttl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes' views of one database: the serving one caches, the other revokes."""
    url = f"sqlite:///{tmp_path / 'tokens.db'}"
    serving, elsewhere = Database(url), Database(url)
    upgrade(serving.engine)
    clock = [1000.0]
    monkeypatch.setattr(tokens.time, "monotonic", lambda: clock[0])
    cache = tokens.TokenCache(serving)
    secret = tokens.create_token(serving, "agent", "n1-agent")
    record = cache.load(secret)
    assert record is not None and record.refusal(utcnow()) is None

    tokens.revoke_token(elsewhere, f"t-{record.principal.token_id}")
    clock[0] += tokens.CACHE_TTL_S / 2
    assert cache.cached(secret) == record  # still trusted within the TTL
    clock[0] += tokens.CACHE_TTL_S
    assert cache.cached(secret) is None  # past it, looked up again
    reloaded = cache.load(secret)
    assert reloaded is not None and reloaded.refusal(utcnow()) == "revoked"
    clock[0] += 3600
    assert cache.cached(secret) == reloaded  # revocation is final: kept
    assert tokens.CACHE_TTL_S <= 2


def test_a_cached_token_expires_on_the_clock() -> None:
    now = utcnow()
    record = tokens.TokenRecord(
        tokens.Principal(1, "x", "user"), now, now + timedelta(seconds=5), None
    )
    assert record.refusal(now) is None
    assert record.refusal(now + timedelta(seconds=5)) == "expired"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("3600s", 3600), ("2w", 1209600)],
)
def test_durations(text: str, seconds: int) -> None:
    assert tokens.parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "0d", "30", "1.5h", "-1d", "1y", "d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        tokens.parse_duration_s(text)


def _cli(*args: str) -> Result:
    """``interstice token ARGS`` in this process (test_usage_errors.py runs the console script
    as a process: the same exit codes)."""
    return CliRunner().invoke(app, ["token", *args])


def test_the_token_commands(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    created = _cli(
        "create", "--role", "scheduler", "--name", "slurm", "--expires-in", "30d", "--db", db
    )
    assert created.exit_code == 0, created.stderr
    secret = created.stdout.strip()
    assert len(secret) >= 40
    assert _cli("create", "--role", "user", "--db", db).exit_code == 0

    listed = _cli("list", "--db", db)
    assert listed.exit_code == 0 and secret not in listed.stdout
    first, second = listed.stdout.splitlines()
    assert first.startswith("t-1 name=slurm role=scheduler created=")
    assert " revoked=no" in first and " expires=never " not in first
    assert second.startswith("t-2 name=user role=user ") and " expires=never " in second

    revoked = _cli("revoke", "t-1", "--db", db)
    assert revoked.exit_code == 0 and revoked.stdout.startswith("t-1 revoked at ")
    assert " revoked=no" not in _cli("list", "--db", db).stdout.splitlines()[0]
    database = Database(db)
    record = tokens.TokenCache(database).load(secret)
    assert record is not None and record.refusal(utcnow()) == "revoked"
    with database.read() as session:
        actions = [(a.action, a.actor, a.token_id) for a in session.query(AuditEntry)]
    assert ("token.revoke", "command line", None) in actions
    assert [a for a, _, _ in actions].count("token.create") == 2
    database.dispose()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("create", "--role", "user", "--expires-in", "soon"),
            "error: --expires-in: 'soon' is not a duration",
        ),
        (("create", "--role", "user", "--name", "two words"), "error: --name: String should match"),
        (("revoke", "t-42"), "error: token t-42 not found"),
        (("revoke", "42"), "error: token 42 not found"),
    ],
)
def test_bad_token_commands_exit_2_with_one_line(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    answer = _cli(*args, "--db", f"sqlite:///{tmp_path / 'cli.db'}")
    assert answer.exit_code == 2
    assert answer.stderr.startswith(message) and len(answer.stderr.strip().splitlines()) == 1


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_requests_that_miss_the_cache_together_read_the_token_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'tokens.db'}")
    upgrade(db.engine)
    cache = tokens.TokenCache(db)
    secret = tokens.create_token(db, "agent", "shared-agent-token")
    loads, load = [], cache.load

    def counted(token: str):
        loads.append(token)
        return load(token)

    monkeypatch.setattr(cache, "load", counted)
    # "Cached now" must not depend on the machine's speed: a loaded VM took over the 1 s TTL
    # between the two gathers (seen in CI), and the second gather loaded again.
    monkeypatch.setattr(tokens, "CACHE_TTL_S", 3600.0)

    async def together(n: int) -> list:
        return await asyncio.gather(*(cache.lookup(secret) for _ in range(n)))

    first = asyncio.run(together(50))
    assert len(loads) == 1 and all(r == first[0] for r in first)
    assert first[0].principal.name == "shared-agent-token"
    assert asyncio.run(together(5)) == first[:5] and len(loads) == 1  # cached now
    assert asyncio.run(cache.lookup("no-such-token")) is None and len(loads) == 2
