"""A real ``interstice serve`` on SQLite (no agents) for the ``interstice job`` tests, and a
runner that calls the CLI with a clean client environment (no INTERSTICE_* variables, a
HOME of its own so no user's config file is read)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

from cli_helpers import Cli  # noqa: E402
from interstice.agents.local_cluster import LocalCluster  # noqa: E402
from local_jobs import start_cluster  # noqa: E402

CLIENT_VARIABLES = ("INTERSTICE_SERVER", "INTERSTICE_TOKEN", "INTERSTICE_CONFIG")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The service with a token per role (made in this process), no nodes."""
    cluster = LocalCluster(tmp_path_factory.mktemp("service"), nodes=[])
    try:
        start_cluster(cluster)
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cli(service: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    for name in CLIENT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return Cli(service)
