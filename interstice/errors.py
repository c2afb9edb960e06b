"""The one way a command-line subcommand reports bad input: one line on stderr, exit code 2."""

import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup


def fail(message: str) -> NoReturn:
    """Print ``error: <message>`` as one line on stderr and exit with code 2.

    Args:
        message: what is wrong, naming the file, option or field at fault.

    Raises:
        typer.Exit: always, with ``code=2``.
    """
    _print_error(message)
    raise typer.Exit(code=2)


def _print_error(message: str) -> None:
    """``error: <message>`` on stderr, its whitespace (newlines too) folded to one line."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)


def token_from_file(token_file: Path) -> str:
    """A bearer token read from ``token_file`` (``--token-file``), stripped of whitespace.

    Raises:
        typer.Exit: (code 2, one line naming the option and the file) it cannot be read.
    """
    try:
        return token_file.read_text().strip()
    except OSError as error:
        fail(f"--token-file {str(token_file)!r}: {error.strerror}")


class OneLineErrors(TyperGroup):
    """The ``interstice`` command group, whose option and argument errors caught by click
    (an unparsable number, an unknown option, a missing argument, a choice not offered)
    are reported as :func:`fail` reports the commands' own checks: one line on stderr,
    ``error: <command>: <message> (see '<command> --help')``, exit code 2, instead of
    typer's framed usage panel. Running with no arguments still prints the help."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        """Run the command line (click's ``main``); with ``standalone_mode`` exit with the
        command's code."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as error:  # click's exceptions (typer vendors click)
            if type(error).__name__ == "NoArgsIsHelpError":  # no arguments: the help
                error.show()  # type: ignore[attr-defined]
                sys.exit(error.exit_code)
            message = error.format_message()
            ctx = getattr(error, "ctx", None)
            if error.exit_code == 2 and ctx is not None:  # a usage error: name the command
                where = ctx.command_path
                message = f"{where}: {message} (see '{where} --help')"
            _print_error(message)
            sys.exit(error.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)
