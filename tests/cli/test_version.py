"""``interstice --version``: the installed package's version, exit status 0."""

import subprocess
import sys
from importlib.metadata import version

from typer.testing import CliRunner

from interstice.cli import app


def test_version_prints_the_installed_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"interstice {version('interstice')}\n"


def test_version_exits_0_in_a_process_of_its_own() -> None:
    """As the console script runs it: no subcommand needed, nothing else printed."""
    shown = subprocess.run(
        [sys.executable, "-c", "from interstice.cli import app; app()", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["interstice", version("interstice")]
