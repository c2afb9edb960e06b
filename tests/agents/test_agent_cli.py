"""``interstice agent``: its options reach the agent's configuration (the agent itself is
replaced by a stub, so nothing connects)."""

import pytest
from typer.testing import CliRunner

from interstice.cli import app

runner = CliRunner()


@pytest.fixture
def configs(monkeypatch: pytest.MonkeyPatch) -> list:
    seen: list = []

    class Stub:
        def __init__(self, config) -> None:
            seen.append(config)

        def run(self) -> int:
            return 0

    monkeypatch.setattr("interstice.agents.agent.Agent", Stub)
    return seen


BASE = ["agent", "--server", "http://service:8000", "--token", "t", "--node", "n1",
        "--host", "10.0.0.1"]  # fmt: skip


def test_the_warm_up_wait_defaults_to_60_s_and_can_be_set(configs: list) -> None:
    assert runner.invoke(app, BASE).exit_code == 0
    assert runner.invoke(app, [*BASE, "--warm-before-register-s", "0"]).exit_code == 0
    assert [c.warm_before_register_s for c in configs] == [60.0, 0.0]
    assert configs[0].node == "n1" and configs[0].server == ("http://service:8000",)


def test_a_negative_warm_up_wait_is_refused(configs: list) -> None:
    result = runner.invoke(app, [*BASE, "--warm-before-register-s", "-1"])
    assert result.exit_code == 2
    assert "--warm-before-register-s" in result.output
    assert configs == []
