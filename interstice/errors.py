"""The one way a command-line subcommand reports bad input: one line on stderr, exit code 2."""

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
