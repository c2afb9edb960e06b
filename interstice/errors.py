"""The one way a command-line subcommand reports bad input: one line on stderr, exit code 2."""

from pathlib import Path
from typing import NoReturn

import typer


def fail(message: str) -> NoReturn:
    """Print ``error: <message>`` as one line on stderr and exit with code 2.

    Args:
        message: what is wrong, naming the file, option or field at fault.

    Raises:
        typer.Exit: always, with ``code=2``.
    """
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    raise typer.Exit(code=2)


def token_from_file(token_file: Path) -> str:
    """A bearer token read from ``token_file`` (``--token-file``), stripped of whitespace.

    Raises:
        typer.Exit: (code 2, one line naming the option and the file) it cannot be read.
    """
    try:
        return token_file.read_text().strip()
    except OSError as error:
        fail(f"--token-file {str(token_file)!r}: {error.strerror}")
