"""Jobs on a :class:`~interstice.agents.local_cluster.LocalCluster`, as their user sees them:
the ``interstice job`` command line and the metrics series; and the cluster started with its
tokens made in the test's process. Shared by the end-to-end tests."""

import json
from typing import Any

from interstice.agents.local_cluster import LocalCluster
from typer.testing import CliRunner, Result

from interstice.cli import app
from interstice.demo.session import create_tokens


def start_cluster(cluster: LocalCluster, **start: Any) -> LocalCluster:
    """``cluster`` started (``start``: :meth:`LocalCluster.start`'s arguments), its database
    migrated and a token per role made in this process first: ``LocalCluster`` alone runs an
    ``interstice token create`` per role, a Python start-up and a migration each."""
    create_tokens(cluster)
    cluster.start(**start)
    return cluster


def job_cli(cluster: LocalCluster, *args: str) -> Result:
    """``interstice job ARGS`` as the cluster's user."""
    flags = ["--server", cluster.url, "--token", cluster.tokens["user"]]
    return CliRunner().invoke(app, ["job", *args, *flags])


def reported_world_sizes(cluster: LocalCluster, job_id: str) -> list[int]:
    """The world sizes of the metrics series, consecutive repeats merged."""
    series = cluster.request("user", "GET", f"/v1/jobs/{job_id}/metrics")["data"]
    sizes: list[int] = []
    for point in series:
        if point["world_size"] and (not sizes or sizes[-1] != point["world_size"]):
            sizes.append(point["world_size"])
    return sizes


def last_json_line(text: str) -> dict[str, Any]:
    """The last line of ``text`` that is a JSON object."""
    for line in reversed(text.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise AssertionError(f"no JSON line in:\n{text[-2000:]}")
