"""Jobs on a :class:`~interstice.agents.local_cluster.LocalCluster`, as their user sees them:
the ``interstice job`` command line and the metrics series. Shared by the end-to-end tests
of the example scripts."""

import json
from typing import Any

from interstice.agents.local_cluster import LocalCluster
from typer.testing import CliRunner, Result

from interstice.cli import app


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
