"""The service from the project's container image, built here without a registry.

``test_service_from_image``, timeline:

1. containers/images.sh builds the Debian base (mmdebstrap) and the service image on it.
2. ``interstice serve`` runs from the image, in the foreground under ``podman run``, on a SQLite
   database in a folder mounted from the host; its log is the podman process's output.
3. ``/healthz`` answers; ``interstice token create`` run from the image, beside it on the same
   database, makes an admin token; an authenticated GET answers 200, an anonymous one 401.
4. SIGTERM to the ``podman run`` process: the service shuts down and exits 0, and no
   container is left.

``test_compose_db_service_tokens``, timeline:

1. The base, the service image and the database image (Debian's PostgreSQL 15) are built.
2. ``podman-compose up -d --no-build db service tokens``: compose.yaml with the local images
   for its base and db (INTERSTICE_BASE, INTERSTICE_DB_IMAGE), the service published on a free
   port (INTERSTICE_HTTP_PORT); the agents (torch) are neither built nor started.
3. ``/healthz`` answers on the published port; the tokens service exits 0 with a token per
   role in its volume; the admin token authenticates.
4. ``podman-compose down -v``: no container, volume or network of the project is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from image import (
    DB_IMAGE,
    ROOT,
    SERVICE_IMAGE,
    build_images,
    leftover_containers,
    podman,
    podman_env,
    service_image,
)
from slurm_cluster import free_port, start_process, tail, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

START_TIMEOUT_S = 90.0
"""Bound on the service's start in its container (imports and migrations on a 2-core VM)."""
STOP_TIMEOUT_S = 30.0
"""Bound on the service's exit after SIGTERM."""
COMPOSE_TIMEOUT_S = 300.0
"""Bound on ``podman-compose up`` and ``down``."""


def test_service_from_image(tmp_path: Path) -> None:
    image = service_image()
    data = tmp_path / "data"
    data.mkdir()
    database = f"sqlite:///{data / 'interstice.db'}"
    port = free_port()
    log = tmp_path / "service.log"
    argv = image.serve_argv("image-test", port, {"INTERSTICE_DB_URL": database}, volumes=[data])
    process = start_process(argv, log, dict(os.environ))
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(f"{url}/healthz", lambda: _healthy(url), START_TIMEOUT_S, lambda: [log])

        created = subprocess.run(
            image.interstice_argv(
                ["token", "create", "--role", "admin", "--db", database], volumes=[data]
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert created.returncode == 0, created.stderr
        token = created.stdout.strip()
        jobs = httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {token}"})
        assert jobs.status_code == 200, jobs.text
        assert jobs.json() == {"data": [], "count": 0}
        assert httpx.get(f"{url}/v1/jobs").status_code == 401

        os.killpg(process.pid, signal.SIGTERM)
        try:
            status = process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no exit {STOP_TIMEOUT_S:g} s after SIGTERM:\n{tail(log)}")
        assert status == 0, tail(log)
        assert "Finished server process" in log.read_text(), tail(log)
        assert (data / "interstice.db").stat().st_uid == os.getuid()
    finally:
        image.stop("image-test", process)
        left = leftover_containers()
    assert not left, f"containers left behind: {left}"


def _healthy(url: str) -> bool:
    """Whether ``url``/healthz answers 200."""
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


class ComposeProject:
    """compose.yaml brought up with podman-compose under a project name of its own, on the
    images built here."""

    def __init__(self, log_dir: Path) -> None:
        self.name = f"itest{os.getpid()}"
        self.port = free_port()
        self.log_dir = log_dir
        self.env = podman_env() | {
            "INTERSTICE_BASE": "localhost/interstice-base:bookworm",
            "INTERSTICE_DB_IMAGE": DB_IMAGE,
            "INTERSTICE_HTTP_PORT": str(self.port),
        }

    def compose(self, *args: str) -> subprocess.CompletedProcess:
        """``podman-compose -p NAME ARGS`` in the repository, its output in compose.log."""
        argv = ["podman-compose", "-p", self.name, "-f", str(ROOT / "compose.yaml"), *args]
        with open(self.log_dir / "compose.log", "a") as log:
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            return subprocess.run(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=self.env,
                timeout=COMPOSE_TIMEOUT_S,
                check=False,
            )

    def containers(self) -> list[str]:
        """The names of the project's containers, stopped ones included."""
        label = f"label=io.podman.compose.project={self.name}"
        listed = podman("ps", "--all", "--filter", label, "--format", "{{.Names}}")
        return listed.stdout.split()

    def logs(self) -> list[Path]:
        """compose.log, and each container's log written next to it."""
        for container in self.containers():
            output = podman("logs", container)
            (self.log_dir / f"{container}.log").write_text(output.stdout + output.stderr)
        return sorted(self.log_dir.glob("*.log"))

    def exited(self, container: str) -> str | None:
        """``"exit status N"`` once the container has exited; None before (or where absent)."""
        state = podman("inspect", "--format", "{{json .State}}", container)
        if state.returncode != 0:
            return None
        fields = json.loads(state.stdout)
        if fields["Running"] or fields["Status"] != "exited":
            return None
        return f"exit status {fields['ExitCode']}"

    def volume_file(self, volume: str, path: str) -> str:
        """The text of ``path`` in the project's volume ``volume``, read on the host."""
        inspected = podman("volume", "inspect", "--format", "{{.Mountpoint}}", self.volume(volume))
        assert inspected.returncode == 0, inspected.stderr
        return (Path(inspected.stdout.strip()) / path).read_text()

    def volume(self, volume: str) -> str:
        """The podman name of the project's volume ``volume``."""
        return f"{self.name}_{volume}"

    def down(self) -> list[str]:
        """``podman-compose down -v``, then removes what it leaves (podman-compose 1.0.3 keeps
        the network).

        Returns:
            The containers and volumes that were still there after ``down``.
        """
        self.compose("down", "-v", "-t", "20")
        left = self.containers()
        for container in left:
            podman("rm", "--force", container)
        label = f"label=io.podman.compose.project={self.name}"
        volumes = podman("volume", "ls", "--filter", label, "--format", "{{.Name}}").stdout
        for volume in volumes.split():
            podman("volume", "rm", "--force", volume)
            left.append(f"volume {volume}")
        podman("network", "rm", "--force", f"{self.name}_default")
        return left


@pytest.fixture
def compose_project(tmp_path: Path) -> Iterator[ComposeProject]:
    """The images built, a :class:`ComposeProject` not yet up; torn down afterwards, failing the
    test where a container or volume of it is left."""
    if not shutil.which("podman-compose"):
        pytest.skip("podman-compose absent (apt-get install podman-compose)")
    build_images("service", "db")
    project = ComposeProject(tmp_path)
    try:
        yield project
    finally:
        left = project.down()
    assert not left, f"left behind by podman-compose down: {left}"


def test_compose_db_service_tokens(compose_project: ComposeProject) -> None:
    project = compose_project
    up = project.compose("up", "-d", "--no-build", "db", "service", "tokens")
    assert up.returncode == 0, tail(project.log_dir / "compose.log")
    started = {name.removeprefix(f"{project.name}_") for name in project.containers()}
    assert started == {"db_1", "service_1", "tokens_1"}

    url = f"http://127.0.0.1:{project.port}"
    wait_for(f"{url}/healthz", lambda: _healthy(url), START_TIMEOUT_S, project.logs)
    service = podman("inspect", "--format", "{{.ImageName}}", f"{project.name}_service_1")
    assert service.stdout.strip() == SERVICE_IMAGE  # compose's `image: interstice`
    tokens = f"{project.name}_tokens_1"
    exited = wait_for(
        f"{tokens} to exit", lambda: project.exited(tokens), START_TIMEOUT_S, project.logs
    )
    assert exited == "exit status 0", "\n".join(tail(log) for log in project.logs())
    admin = project.volume_file("tokens", "admin").strip()
    jobs = httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {admin}"})
    assert jobs.status_code == 200, jobs.text
    for role in ("agent", "user"):
        assert project.volume_file("tokens", role).strip()
