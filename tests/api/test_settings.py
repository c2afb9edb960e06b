"""Settings precedence (flags > environment > TOML file > defaults) and CLI errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from interstice.api.settings import load_settings
from typer.testing import CliRunner

from interstice.cli import app


def test_flags_beat_environment_beat_the_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "interstice.toml"
    config.write_text('port = 9000\ndebounce_s = 2.5\nhost = "0.0.0.0"\n')
    monkeypatch.setenv("INTERSTICE_DEBOUNCE_S", "0.1")
    settings = load_settings(config, host="127.0.0.2")
    assert (settings.port, settings.debounce_s, settings.host) == (9000, 0.1, "127.0.0.2")
    assert load_settings().db_url == "sqlite:///./interstice.db"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["token", "create", "--role", "root"],
            "error: --role must be one of scheduler, agent, user, admin, got 'root'",
        ),
        (
            ["db", "upgrade", "--db", "mysql://x"],
            "error: setting db_url: Value error, db_url must be a sqlite:/// or "
            "postgresql+psycopg:// URL",
        ),
        (
            ["serve", "--config", "/nonexistent.toml"],
            "error: config file /nonexistent.toml does not exist",
        ),
    ],
)
def test_cli_errors_are_one_line_with_exit_code_2(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the command runs in this process: a folder of its own
    done = CliRunner().invoke(app, args)
    assert (done.exit_code, done.stderr.strip()) == (2, message)
