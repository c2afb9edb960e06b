"""``interstice node``: an admin's commands on the service's nodes.

``release NAME`` ends a node's quarantine (``POST /v1/nodes/{name}/release``), as Slurm's
``scontrol update nodename=NAME state=resume`` ends a drain: a node whose launch failed for
a reason of its own gets no job until its agent proves healthy again or an admin releases
it. The server URL and the token follow the rules of ``interstice job``
(:mod:`interstice.client_cli`); the token must be an admin's. Exit codes: 0 success; 2 an
HTTP 4xx answer (an unknown node, a token that is not an admin's: one line); 1 the service
is unreachable or answered 5xx.
"""

from typing import Annotated
from urllib.parse import quote

import typer

from interstice.client_cli import ServerOption, client

node_app = typer.Typer(
    help="An admin's commands on the nodes (release a quarantine).", no_args_is_help=True
)

AdminTokenOption = Annotated[
    str | None,
    typer.Option("--token", help="Admin bearer token (else $INTERSTICE_TOKEN, the config file)."),
]


@node_app.command("release")
def release(
    name: Annotated[str, typer.Argument(help="Node name, e.g. n3.")],
    server: ServerOption = None,
    token: AdminTokenOption = None,
) -> None:
    """End the node's quarantine (like scontrol's state=resume): jobs may be placed on it."""
    node = client(server, token).call("POST", f"/v1/nodes/{quote(name, safe='')}/release")
    usable = "allocatable" if node["allocatable"] else "not allocatable (busy, or no alive agent)"
    typer.echo(f"node {node['name']} not quarantined; {usable}")
