"""What the ``interstice job`` tests share."""

from interstice.agents.local_cluster import LocalCluster
from typer.testing import CliRunner, Result

from interstice.cli import app


class Cli:
    """``interstice job ...`` in this process, as the user of ``service`` by default."""

    def __init__(self, service: LocalCluster) -> None:
        self.service = service
        self.runner = CliRunner()

    def __call__(self, *args: str, auth: bool = True) -> Result:
        """Run ``interstice job ARGS`` (with ``--server``/``--token`` when ``auth``)."""
        flags = ["--server", self.service.url, "--token", self.service.tokens["user"]]
        return self.runner.invoke(app, ["job", *args, *(flags if auth else [])])

    def as_token(self, token: str, *args: str) -> Result:
        """Run ``interstice job ARGS`` with another token."""
        return self.runner.invoke(
            app, ["job", *args, "--server", self.service.url, "--token", token]
        )
