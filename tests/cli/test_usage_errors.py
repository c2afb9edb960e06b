"""Options and arguments that click itself rejects (an unparsable number, an unknown option
or command, a missing argument, a choice not offered) are reported as the commands' own
checks are: one line on stderr naming the command and the option, exit code 2."""

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from interstice.cli import app

CASES = [
    (["replay", "--hours", "abc"], "error: interstice replay: Invalid value for '--hours'"),
    (
        ["solve", "--backend", "foo", "x.json"],
        "error: interstice solve: Invalid value for '--backend'",
    ),
    (["solve"], "error: interstice solve: Missing argument 'snapshot'"),
    (["job", "list", "--bogus"], "error: interstice job list: No such option: --bogus"),
    (["token", "nosuch"], "error: interstice token: No such command 'nosuch'"),
]


@pytest.mark.parametrize(("args", "start"), CASES)
def test_a_usage_error_is_one_line_and_exit_code_2(args: list[str], start: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(start), result.stderr
    assert f"(see 'interstice {args[0]}" in result.stderr


def test_no_arguments_still_print_the_help() -> None:
    result = CliRunner().invoke(app, [])
    assert "Usage: interstice" in result.output
    assert "solve" in result.output and "replay" in result.output
    assert "error:" not in result.output


def test_the_console_script_exits_with_the_commands_code() -> None:
    """As the console script runs it (``app()``): 0 on success, 2 on a usage error."""
    run = [sys.executable, "-c", "from interstice.cli import app; app()"]
    ok = subprocess.run([*run, "solve", "--help"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [*run, "replay", "--hours", "x"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: ")
