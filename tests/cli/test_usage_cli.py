"""``interstice usage`` against a real service: a job submitted with ``interstice job``, its
node time and samples recorded at known times, read back as a table, JSON and ``|``-separated
rows; bad input is exit code 2 and one line."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from cli_helpers import Cli
from interstice.api.store.tables import JobMetric, Rescale, Token
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session
from typer.testing import Result

from interstice.cli import app

T0 = datetime(2026, 1, 1, 6, 0, tzinfo=UTC)


def usage(cli: Cli, *args: str, token: str = "user") -> Result:
    """``interstice usage ARGS`` as ``token``'s role."""
    flags = ["--server", cli.service.url, "--token", cli.service.tokens[token]]
    return cli.runner.invoke(app, ["usage", *args, *flags])


@pytest.fixture(scope="module")
def ran(service) -> str:  # type: ignore[no-untyped-def]
    """The user's job j ran on two nodes from T0 to T0 + 1,800 s (one node-hour) and
    reported 500 samples at T0 + 60 s; returns the user's name (its token's)."""
    cli = Cli(service)
    submitted = cli("submit", "--command", "train.py", "--nodes", "1:2", "--total-samples", "900")
    assert submitted.exit_code == 0, submitted.output
    job_id = int(submitted.stdout.split()[-1].removeprefix("j-"))
    engine = create_engine(f"sqlite:///{service.root / 'interstice.db'}")
    with Session(engine) as session, session.begin():
        for at, nodes in ((T0, ["n1", "n2"]), (T0 + timedelta(seconds=1800), [])):
            session.add(Rescale(job_id=job_id, at=at, from_nodes=[], to_nodes=nodes,
                                from_spb_depth=0, to_spb_depth=0, reason="allocation"))  # fmt: skip
        session.add(JobMetric(job_id=job_id, at=T0 + timedelta(seconds=60), step=3,
                              samples=500.0, metrics={}))  # fmt: skip
        user = session.scalar(select(Token.name).where(Token.role == "user"))
    engine.dispose()
    return user


WINDOW = ("--since", "2026-01-01", "--until", "2026-01-02")


def test_json_gives_the_service_rows(cli: Cli, ran: str) -> None:
    result = usage(cli, *WINDOW, "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["data"] == [
        {"user": ran, "day": "2026-01-01", "node_hours": 1.0, "samples": 500.0, "jobs": 1}
    ]


def test_parsable_rows_and_the_table(cli: Cli, ran: str) -> None:
    parsable = usage(cli, *WINDOW, "--parsable")
    assert parsable.exit_code == 0, parsable.output
    assert parsable.stdout.splitlines() == [
        "user|day|node_hours|samples|jobs",
        f"{ran}|2026-01-01|1.0|500.0|1",
    ]
    table = usage(cli, *WINDOW)
    assert table.exit_code == 0, table.output
    lines = [line.split() for line in table.stdout.splitlines() if line.strip()]
    assert [ran, "2026-01-01", "1.00", "500", "1"] in lines
    assert [ran, "total", "1.00", "500"] in lines


def test_an_admin_sees_the_user_and_a_user_only_itself(cli: Cli, ran: str) -> None:
    admin = usage(cli, *WINDOW, "--user", ran, "--parsable", token="admin")
    assert admin.exit_code == 0 and admin.stdout.splitlines()[1].startswith(f"{ran}|")
    other = usage(cli, "--user", "somebody-else")
    assert other.exit_code == 2, other.output
    assert other.stderr.strip() == (
        f"error: GET /v1/usage: 403 user: a user token sees only its own usage ({ran})"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--since", "yesterday"),
         "error: --since must be an ISO 8601 time like 2026-01-31 or 2026-01-31T12:00, "
         "got 'yesterday'"),
        (("--json", "--parsable"), "error: --json and --parsable both choose the output: give one"),
        (("--until", "the end"),
         "error: --until must be an ISO 8601 time like 2026-01-31 or 2026-01-31T12:00, "
         "got 'the end'"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_code_2(cli: Cli, ran: str, args, message) -> None:
    result = usage(cli, *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == message and "Traceback" not in result.output
