"""The ``interstice`` command line: one typer app, one subcommand per capability.

Every subcommand lives beside the code it drives and imports its heavy dependencies
(solvers, FastAPI, torch) inside the command, so ``interstice --help`` and the
service never import torch.
"""

from importlib.metadata import PackageNotFoundError, version

import typer

from interstice import client_cli, node_cli, solve_cli, trace_cli, usage_cli
from interstice.agents import cli as agents_cli
from interstice.agents.slurm import cli as slurm_cli
from interstice.api import cli as api_cli
from interstice.demo import cli as demo_cli
from interstice.errors import OneLineErrors
from interstice.models import cli as models_cli
from interstice.replay import cli as replay_cli

app = typer.Typer(
    name="interstice",
    cls=OneLineErrors,
    help="Fill a supercomputer's transient idle nodes with elastic deep-learning training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        try:
            installed = version("interstice")
        except PackageNotFoundError:  # a checkout on sys.path, not installed
            installed = "unknown (not installed)"
        typer.echo(f"interstice {installed}")
        raise typer.Exit()


@app.callback()
def main(
    show_version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print `interstice <version>` (the installed package's) and exit.",
    ),
) -> None:
    pass


app.command("solve")(solve_cli.solve)
app.command("replay")(replay_cli.replay)
app.add_typer(trace_cli.trace_app, name="trace")
app.command("serve")(api_cli.serve)
app.add_typer(api_cli.token_app, name="token")
app.add_typer(api_cli.db_app, name="db")
app.command("agent")(agents_cli.agent)
app.add_typer(slurm_cli.slurm_app, name="slurm")
app.command("profile")(models_cli.profile)
app.add_typer(client_cli.job_app, name="job")
app.command("usage")(usage_cli.usage)
app.add_typer(node_cli.node_app, name="node")
app.command("demo")(demo_cli.demo)
