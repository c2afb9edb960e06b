"""Migration 0002 on a database written by 0001: existing jobs keep their values under the
new names (batch_size -> global_batch_size, checkpoint_dir -> job_dir, total_samples an
integer), the new columns get their defaults, and the downgrade restores 0001's schema.
Migration 0005 on one written by 0004: stored node events count as applied. Migration 0006:
nodes and stored events get no forecast (``until`` None), and the downgrade drops it.
Migration 0007: older idle intervals count in no forecast coverage (``forecast`` None).
Migration 0008: existing tokens are unbound, existing jobs have no Unix owner and existing
agents did not say they run jobs as their owners. Migration 0009: existing nodes are not
quarantined, and the downgrade drops the quarantine. Migration 0010: existing jobs have no last
progress (their stall clock counts from their generation's start), and the downgrade drops
it."""

from __future__ import annotations

from alembic import command
from interstice.api.services import state
from interstice.api.store import db as database
from interstice.api.store.tables import (
    Agent,
    IdleInterval,
    Job,
    Node,
    NodeEvent,
    Rescale,
    Token,
)
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.orm import Session


def _migrate(engine, revision: str, down: bool = False) -> None:  # type: ignore[no-untyped-def]
    with database.migration_config(engine) as config:
        (command.downgrade if down else command.upgrade)(config, revision)


def _engine_at(db_url: str, revision: str, *rows: str) -> Engine:
    """An engine on ``db_url`` migrated to ``revision``, with the ``INSERT`` statements
    ``rows`` run."""
    engine = database.make_engine(db_url)
    _migrate(engine, revision)
    with engine.begin() as c:
        for row in rows:
            c.execute(text(row))
    return engine


def test_0002_keeps_the_jobs_of_0001(db_url: str) -> None:
    engine = _engine_at(
        db_url,
        "0001",
        "INSERT INTO tokens (id, name, role, token_sha256, created_at) "
        "VALUES (1, 'u', 'user', 'x', '2026-01-01 00:00:00')",
        "INSERT INTO jobs (id, owner_token_id, state, model, min_nodes, max_nodes, "
        "total_samples, samples_done, priority, parallelism, batch_size, rescale_up_s, "
        "rescale_down_s, entrypoint, command, checkpoint_dir, spb_depth, generation, "
        "failed_commands, submitted_at) VALUES (1, 1, 'running', 'tinycnn', 1, 2, "
        "1500.5, 10, 1, 'dp', 32, 18, 12, NULL, NULL, '/c/j-1', 0, 1, 0, "
        "'2026-01-01 00:00:00')",
        "INSERT INTO rescales (id, job_id, at, from_nodes, to_nodes, from_spb_depth, "
        "to_spb_depth, reason) VALUES (1, 1, '2026-01-01 00:00:01', '[]', '[\"n1\"]', "
        "0, 0, 'allocation')",
    )
    database.upgrade(engine)
    with Session(engine) as session:
        job = session.get_one(Job, 1)
        assert (job.global_batch_size, job.total_samples, job.job_dir) == (32, 1501, "/c/j-1")
        assert (job.env, job.nproc_per_node, job.workdir, job.error) == ({}, "auto", None, None)
        assert (job.last_step, job.last_loss, job.generation_step) == (None,) * 3
        rescale = session.get_one(Rescale, 1)
        assert (rescale.to_nodes, rescale.generation, rescale.cost_s) == (["n1"], None, None)
    _migrate(engine, "0001", down=True)
    columns = {c["name"] for c in inspect(engine).get_columns("jobs")}
    assert {"batch_size", "checkpoint_dir"} <= columns
    assert not {"global_batch_size", "job_dir", "env"} & columns
    assert "job_metrics" not in inspect(engine).get_table_names()
    engine.dispose()


def test_0005_takes_the_stored_events_as_applied(db_url: str) -> None:
    engine = _engine_at(
        db_url,
        "0004_tokens",
        "INSERT INTO node_events (event_id, node, state, at, grace_s, reclaimed_job_id, "
        "received_at) VALUES ('e1', 'n1', 'idle', '2026-01-01 00:00:00', 0, NULL, "
        "'2026-01-01 00:00:01')",
    )
    database.upgrade(engine)
    with Session(engine) as session:
        assert session.get_one(NodeEvent, "e1").superseded_by_at is None
    _migrate(engine, "0004_tokens", down=True)
    assert "superseded_by_at" not in {c["name"] for c in inspect(engine).get_columns("node_events")}
    engine.dispose()


def test_0006_gives_nodes_and_events_no_forecast(db_url: str) -> None:
    engine = _engine_at(
        db_url,
        "0005_superseded_events",
        "INSERT INTO nodes (name, state, since, holder_job_id, event_at) VALUES "
        "('n1', 'idle', '2026-01-01 00:00:00', NULL, '2026-01-01 00:00:00')",
        "INSERT INTO node_events (event_id, node, state, at, grace_s, reclaimed_job_id, "
        "received_at, superseded_by_at) VALUES ('e1', 'n1', 'idle', '2026-01-01 00:00:00', 0, "
        "NULL, '2026-01-01 00:00:01', NULL)",
    )
    database.upgrade(engine)
    with Session(engine) as session:
        assert session.get_one(NodeEvent, "e1").until is None
        node = session.get_one(Node, "n1")
        assert (node.state, node.until) == ("idle", None)
    _migrate(engine, "0005_superseded_events", down=True)
    for table in ("nodes", "node_events"):
        assert "until" not in {c["name"] for c in inspect(engine).get_columns(table)}
    engine.dispose()


def test_0007_counts_older_idle_intervals_in_no_coverage(db_url: str) -> None:
    engine = _engine_at(
        db_url,
        "0006_node_until",
        "INSERT INTO idle_intervals (node, started_at, length_s) VALUES "
        "('n1', '2026-01-01 00:00:00', 60)",
    )
    database.upgrade(engine)
    with Session(engine) as session:
        (interval,) = session.scalars(select(IdleInterval))
        assert (interval.node, interval.length_s, interval.forecast) == ("n1", 60.0, None)
        assert state.forecast_coverage(session) is None
    _migrate(engine, "0006_node_until", down=True)
    assert "forecast" not in {c["name"] for c in inspect(engine).get_columns("idle_intervals")}
    engine.dispose()


def test_0008_leaves_tokens_unbound_and_jobs_without_a_unix_owner(db_url: str) -> None:
    engine = _engine_at(
        db_url,
        "0007_idle_interval_forecast",
        "INSERT INTO tokens (id, name, role, token_sha256, created_at) "
        "VALUES (1, 'u', 'user', 'x', '2026-01-01 00:00:00')",
        "INSERT INTO jobs (id, owner_token_id, state, model, min_nodes, max_nodes, "
        "total_samples, samples_done, priority, parallelism, global_batch_size, rescale_up_s, "
        "rescale_down_s, entrypoint, command, workdir, env, nproc_per_node, job_dir, "
        "spb_depth, generation, failed_commands, submitted_at) VALUES (1, 1, 'queued', "
        "'tinycnn', 1, 2, 1000, 0, 1, 'dp', 32, 18, 12, NULL, NULL, NULL, '{}', 'auto', "
        "'/c/j-1', 0, 0, 0, '2026-01-01 00:00:00')",
        "INSERT INTO agents (id, node, host, ports, devices, state, registered_at) "
        "VALUES (1, 'n1', 'h', '[]', '[]', 'alive', '2026-01-01 00:00:00')",
    )
    database.upgrade(engine)
    with Session(engine) as session:
        assert session.get_one(Agent, 1).runs_as_owner is False
        job = session.get_one(Job, 1)
        assert (job.owner_token_id, job.owner_name, job.owner_uid) == (1, None, None)
        token = session.get_one(Token, 1)
        assert (token.unix_name, token.unix_uid) == (None, None)
        token.unix_name, token.unix_uid = "alice", 2**31 + 5  # uids above a signed int32
        job.owner_name, job.owner_uid = "alice", 2**31 + 5
        session.commit()
    with Session(engine) as session:
        assert session.get_one(Job, 1).owner_uid == 2**31 + 5
    _migrate(engine, "0007_idle_interval_forecast", down=True)
    tables = ("jobs", "tokens", "agents")
    columns = {t: {c["name"] for c in inspect(engine).get_columns(t)} for t in tables}
    assert "runs_as_owner" not in columns["agents"]
    assert not {"owner_name", "owner_uid"} & columns["jobs"]
    assert not {"unix_name", "unix_uid"} & columns["tokens"]
    assert "ix_jobs_owner_uid" not in {i["name"] for i in inspect(engine).get_indexes("jobs")}
    engine.dispose()


def test_0009_leaves_existing_nodes_unquarantined(db_url: str) -> None:
    engine = _engine_at(
        db_url,
        "0008_unix_owners",
        "INSERT INTO nodes (name, state, since) VALUES ('n1', 'idle', '2026-01-01 00:00:00')",
        "INSERT INTO agents (id, node, host, ports, devices, state, registered_at) "
        "VALUES (1, 'n1', 'h', '[]', '[]', 'alive', '2026-01-01 00:00:00')",
    )
    database.upgrade(engine)
    with Session(engine) as session:
        node = session.get_one(Node, "n1")
        assert (node.quarantined_at, node.quarantine_reason) == (None, None)
        assert state.allocatable_nodes(session) == ["n1"]
    _migrate(engine, "0008_unix_owners", down=True)
    columns = {c["name"] for c in inspect(engine).get_columns("nodes")}
    assert not {"quarantined_at", "quarantine_reason"} & columns
    engine.dispose()


def test_0010_gives_existing_jobs_no_last_progress(db_url: str) -> None:
    engine = _engine_at(
        db_url,
        "0009_node_quarantine",
        "INSERT INTO tokens (id, name, role, token_sha256, created_at) "
        "VALUES (1, 'u', 'user', 'x', '2026-01-01 00:00:00')",
        "INSERT INTO jobs (id, owner_token_id, state, model, min_nodes, max_nodes, "
        "total_samples, samples_done, priority, parallelism, global_batch_size, rescale_up_s, "
        "rescale_down_s, env, nproc_per_node, job_dir, spb_depth, generation, "
        "failed_commands, submitted_at, generation_step) VALUES (1, 1, 'running', 'tinycnn', "
        "1, 2, 1000, 0, 1, 'dp', 32, 18, 12, '{}', 'auto', '/c/j-1', 0, 1, 0, "
        "'2026-01-01 00:00:00', 7)",
    )
    database.upgrade(engine)
    with Session(engine) as session:
        job = session.get_one(Job, 1)
        assert (job.generation_step, job.last_progress_at) == (7, None)
    _migrate(engine, "0009_node_quarantine", down=True)
    assert "last_progress_at" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
    engine.dispose()
