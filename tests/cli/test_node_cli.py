"""``interstice node release`` against a real service: it ends a node's quarantine with an
admin token; an unknown node or a token of another role is exit code 2 and one line."""

import pytest
from cli_helpers import Cli
from typer.testing import Result

from interstice.cli import app


def release(cli: Cli, *args: str, token: str = "admin") -> Result:
    flags = ["--server", cli.service.url, "--token", cli.service.tokens[token]]
    return cli.runner.invoke(app, ["node", "release", *args, *flags])


@pytest.fixture
def quarantined(cli: Cli) -> str:
    """Node q1, idle, whose agent registered with a fault."""
    body = {"node": "q1", "host": "127.0.0.1", "report_idle": True, "fault": "torch missing"}
    cli.service.request("agent", "POST", "/v1/agents", json=body)
    return "q1"


def test_release_ends_the_quarantine(cli: Cli, quarantined: str) -> None:
    result = release(cli, quarantined)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"node {quarantined} not quarantined; allocatable\n"
    (node,) = [n for n in cli.service.service_nodes("admin") if n["name"] == quarantined]
    assert (node["quarantined_at"], node["quarantine_reason"]) == (None, None)


@pytest.mark.parametrize(
    ("node", "token", "expected"),
    [("no-such-node", "admin", "404 node no-such-node not found"), ("q1", "user", "403")],
)
def test_an_unknown_node_or_another_role_is_one_line(
    cli: Cli, quarantined: str, node: str, token: str, expected: str
) -> None:
    result = release(cli, node, token=token)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
