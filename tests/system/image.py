"""The project's container images for the system tests: built once per test session without a
registry (containers/images.sh: a Debian base made by mmdebstrap, then the Dockerfile on it),
and the command lines that run ``interstice`` from them with podman.

Every podman call takes this machine's settings from containers/containers.conf (runc,
cgroupfs, explicit ulimits, host networking), through ``CONTAINERS_CONF``: a container reaches a
PostgreSQL on 127.0.0.1, and listens on the host's ports. It runs as the calling user, so that
the files it writes in bind-mounted folders are the caller's, as with a native
``interstice serve``. Its output goes to the podman process's stdout and stderr.

Example::

    image = service_image()  # skips where podman cannot be used here, saying why
    argv = image.serve_argv("replica-a", port, {"INTERSTICE_DB_URL": url}, volumes=[jobs])
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    ...
    image.stop("replica-a", process)  # SIGTERM, then SIGKILL after the grace
    assert not image.leftover_containers()
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = ROOT / "containers" / "containers.conf"
BASE_IMAGE = "localhost/interstice-base:bookworm"
SERVICE_IMAGE = "localhost/interstice:latest"
DB_IMAGE = "localhost/interstice-postgres:15"
IMAGES = {"service": SERVICE_IMAGE, "db": DB_IMAGE}
"""containers/images.sh's arguments and the images they build."""
BUILD_TIMEOUT_S = 1800.0
"""Bound on building the base and the images from nothing (about 3 minutes on a 2-core VM)."""
PODMAN_TIMEOUT_S = 120.0
"""Bound on one podman command other than a build or a run."""
LABEL = f"interstice.test={os.getpid()}"
"""Carried by every container this test session starts (see :func:`leftover_containers`)."""

_built: set[str] = set()


def podman_env() -> dict[str, str]:
    """The environment for podman and podman-compose: this machine's settings, the Docker
    image format (the OCI format drops HEALTHCHECK)."""
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF), "BUILDAH_FORMAT": "docker"}


def podman(*args: str, timeout_s: float = PODMAN_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run ``podman ARGS`` with :func:`podman_env`, output captured, not checked."""
    return subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=podman_env(),
        check=False,
    )


def tail(text: str, lines: int = 30) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])


def require_podman() -> None:
    """Skip, saying why, where podman cannot build or run the images here: not root (rootless
    podman is not set up on these machines), podman or mmdebstrap absent, or ``podman info``
    failing (its error shown)."""
    if os.geteuid() != 0:
        pytest.skip("podman's images are built and run as root (sudo), not as this user")
    if not shutil.which("podman"):
        pytest.skip("podman absent (apt-get install podman runc)")
    info = podman("info", "--format", "{{.Host.OCIRuntime.Name}}")
    if info.returncode != 0:
        pytest.skip(f"podman info fails here: {tail(info.stderr, 5)}")
    if podman("image", "exists", BASE_IMAGE).returncode != 0 and not shutil.which("mmdebstrap"):
        pytest.skip(f"mmdebstrap absent (apt-get install mmdebstrap) to build {BASE_IMAGE}")


def build_images(*names: str) -> None:
    """Build the base and the images ``names`` (``service``, ``db``) with containers/images.sh,
    once per test session.

    Args:
        names: keys of :data:`IMAGES`.

    Raises:
        pytest.skip.Exception: podman cannot be used here (:func:`require_podman`).
        pytest.fail.Exception: the build failed or ran past :data:`BUILD_TIMEOUT_S`; the
            message holds its output's tail.
    """
    missing = [name for name in names if name not in _built]
    if not missing:
        return
    require_podman()
    command = [str(ROOT / "containers" / "images.sh"), *missing]
    try:
        built = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            env=podman_env(),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode(errors="replace")  # bytes, even with text=True
        pytest.fail(f"{' '.join(command)} ran past {BUILD_TIMEOUT_S:g} s:\n{tail(output)}")
    if built.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} failed ({built.returncode}):\n"
            f"{tail(built.stdout, 15)}\n{tail(built.stderr)}"
        )
    print(*(line for line in built.stdout.splitlines() if " took " in line), sep="\n")
    _built.update(missing)


def build_service_image() -> str:
    """The service image (no extras), built once per test session.

    Returns:
        Its name, :data:`SERVICE_IMAGE`.

    Raises:
        pytest.skip.Exception: podman cannot be used here.
        pytest.fail.Exception: the build failed (its output's tail in the message).
    """
    build_images("service")
    return SERVICE_IMAGE


def service_command(
    image: str,
    args: list[str],
    env: Mapping[str, str],
    *,
    name: str | None = None,
    volumes: Iterable[Path | str] = (),
    read_only: Iterable[Path | str] = (),
) -> list[str]:
    """The command line that runs ``interstice ARGS`` from ``image`` in a container, removed
    when it exits, in the foreground: SIGTERM and SIGINT to it reach the service.

    Args:
        image: the image, e.g. :func:`build_service_image`'s.
        args: ``interstice``'s arguments, e.g. ``["serve", "--port", "8123"]``.
        env: the container's environment, e.g. ``{"INTERSTICE_DB_URL": url}``; nothing else
            of the caller's reaches it.
        name: the container's name (unique on the host); None: podman picks one.
        volumes: host folders, each mounted at the same path in the container.
        read_only: host files or folders, each mounted read-only at the same path (e.g.
            ``/etc/passwd``, for the host's accounts).

    Returns:
        The argv, which sets ``CONTAINERS_CONF`` itself (``env CONTAINERS_CONF=... podman
        run ...``), so it runs with any environment.
    """
    argv = ["env", f"CONTAINERS_CONF={CONTAINERS_CONF}", "podman", "run", "--rm"]
    argv += ["--label", LABEL, "--user", f"{os.getuid()}:{os.getgid()}"]
    # the image's HEALTHCHECK needs systemd timers, absent here; the tests poll /healthz
    argv += ["--no-healthcheck"]
    if name is not None:
        argv += ["--name", name]
    for folder in volumes:
        argv += ["--volume", f"{folder}:{folder}"]
    for path in read_only:
        argv += ["--volume", f"{path}:{path}:ro"]
    for variable, value in env.items():
        argv += ["--env", f"{variable}={value}"]
    return [*argv, image, "interstice", *args]


@dataclass(frozen=True)
class ServiceImage:
    """The built service image and how the tests run, stop and clean up its containers.

    Attributes:
        name: the image's name.
    """

    name: str

    @staticmethod
    def container(name: str) -> str:
        """The container name of a run called ``name``: prefixed with this session's PID, so
        that two test sessions on one host do not clash."""
        return f"interstice-{os.getpid()}-{name}"

    def interstice_argv(
        self, args: list[str], env: Mapping[str, str] | None = None, volumes: Iterable[Path] = ()
    ) -> list[str]:
        """The argv of a one-off ``interstice ARGS`` from the image (e.g. ``token create``).

        Args:
            args: ``interstice``'s arguments.
            env: the container's environment (default: none).
            volumes: host folders mounted at the same path.

        Returns:
            The argv (see :func:`service_command`).
        """
        return service_command(self.name, args, env or {}, volumes=volumes)

    def serve_argv(
        self,
        name: str,
        port: int,
        settings: Mapping[str, str],
        volumes: Iterable[Path] = (),
        read_only: Iterable[Path] = (),
    ) -> list[str]:
        """The argv of ``interstice serve`` on 127.0.0.1:``port`` in a container named after
        ``name`` (pass the same ``name`` to :meth:`stop` and :meth:`kill`).

        Args:
            name: what the test calls this service, e.g. ``replica-a``.
            port: TCP port on the host's loopback interface.
            settings: ``INTERSTICE_*`` environment variables of the service.
            volumes: host folders mounted at the same path (a SQLite file's, the checkpoints').
            read_only: host files or folders mounted read-only at the same path.

        Returns:
            The argv (see :func:`service_command`).
        """
        args = ["serve", "--host", "127.0.0.1", "--port", str(port)]
        return service_command(
            self.name,
            args,
            settings,
            name=self.container(name),
            volumes=volumes,
            read_only=read_only,
        )

    def stop(self, name: str, process: subprocess.Popen, grace_s: float = 20.0) -> int | None:
        """Stop the container ``name`` (``podman stop``: SIGTERM, SIGKILL after ``grace_s``)
        and wait for its ``podman run`` process; nothing where both are gone already.

        Args:
            name: as given to :meth:`serve_argv`.
            process: the ``podman run`` process.
            grace_s: seconds between SIGTERM and SIGKILL.

        Returns:
            The process's exit status (the service's: 0 after a clean shutdown); None where it
            had to be killed.
        """
        container = self.container(name)
        if process.poll() is None:
            podman("stop", "--time", str(round(grace_s)), container, timeout_s=grace_s + 60)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
                return None
        podman("rm", "--force", "--ignore", container)
        return process.returncode

    def kill(self, name: str, process: subprocess.Popen) -> None:
        """SIGKILL the service in container ``name``, as a node failure would, and wait for its
        ``podman run`` process (which removes the container)."""
        podman("kill", "--signal", "KILL", self.container(name))
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def leftover_containers(self) -> list[str]:
        """Remove every container this test session started that is still there.

        Returns:
            Their names (empty: none was left).
        """
        return leftover_containers()


def leftover_containers(label: str = LABEL) -> list[str]:
    """Force-remove the containers labelled ``label`` (default: this session's).

    Returns:
        Their names (empty: none was left).
    """
    listed = podman("ps", "--all", "--filter", f"label={label}", "--format", "{{.Names}}")
    names = listed.stdout.split()
    for name in names:
        podman("rm", "--force", "--time", "5", name)
    return names


def service_image() -> ServiceImage:
    """The service image, built once per test session (see :func:`build_service_image`)."""
    return ServiceImage(build_service_image())
