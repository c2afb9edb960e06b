"""The wheel holds what an installed ``interstice`` needs outside a checkout: every example
job file with the script its ``command`` names, where its ``workdir`` points once installed
(``interstice demo`` submits them), the service's non-Python files and the synthetic trace;
and, installed alone in a fresh virtual environment far from any checkout or data, it runs
``interstice demo`` to its summary."""

import json
import os
import posixpath
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from the files git tracks or would track (a copy: no build/ in the
    checkout)."""
    root = tmp_path_factory.mktemp("wheel")
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    source = root / "source"
    for name in filter(None, map(bytes.decode, tracked)):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((REPO / name).read_bytes())
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(root / "dist"), str(source)],
        check=True,
        capture_output=True,
    )
    (built,) = (root / "dist").glob("interstice-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel_files(wheel: Path) -> set[str]:
    """The paths in :func:`wheel`."""
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


@pytest.mark.slow
@pytest.mark.parametrize("job_file", sorted(p.name for p in (REPO / "examples").glob("*.toml")))
def test_example_jobs_and_their_scripts_are_installed(wheel_files: set[str], job_file: str) -> None:
    installed = f"interstice/examples/{job_file}"
    assert installed in wheel_files
    job = tomllib.loads((REPO / "examples" / job_file).read_text())
    # (the workdir relative to the job file, as the agent resolves it)
    script = posixpath.normpath(f"interstice/examples/{job['workdir']}/{job['command'][0]}")
    assert script in wheel_files, f"{job_file}: {script} is not in the wheel"


@pytest.mark.slow
def test_the_service_migrations_and_dashboard_are_installed(wheel_files: set[str]) -> None:
    assert "interstice/api/store/alembic.ini" in wheel_files
    assert any(name.startswith("interstice/api/store/migrations/versions/") for name in wheel_files)
    assert any(name.startswith("interstice/api/ui/") for name in wheel_files)


@pytest.mark.slow
def test_the_synthetic_trace_is_installed(wheel_files: set[str]) -> None:
    assert "interstice/traces/synthetic-node-state.csv.gz" in wheel_files
    assert "interstice/traces/README.md" in wheel_files


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_wheel_alone_runs_the_demo(wheel: Path, tmp_path_factory: pytest.TempPathFactory):
    """The quick start's ``interstice demo`` from the wheel in a fresh virtual environment
    (its dependencies from this one's site-packages: nothing downloaded), in a folder with no
    checkout and no data around, ``$INTERSTICE_DATA_DIR`` unset: it replays the synthetic
    trace, says so first, and a job trains."""
    root = tmp_path_factory.mktemp("fresh")
    assert not root.is_relative_to(REPO.parent)
    venv, cwd = root / "venv", root / "work"
    cwd.mkdir()
    # no pip of its own (ensurepip takes a minute on a loaded machine): this one's, seen
    # through the system site-packages, installs into the venv it runs in
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed"]
        + [str(wheel)],
        check=True,
        capture_output=True,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("INTERSTICE_DATA_DIR", "PYTHONPATH")}
    where = subprocess.run(
        [python, "-c", "from interstice import data; print(data.__file__, data.demo_trace())"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(venv)), where  # the wheel's copy, not this checkout's
    assert where.endswith("synthetic-node-state.csv.gz\n"), where  # no real trace around
    done = subprocess.run(
        ["nice", "-n", "10", venv / "bin" / "interstice", "demo", "--duration-s", "90"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,  # the start on a loaded 2-core machine is slow; the replay is 90 s
    )
    output = f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode == 0, output
    lines = done.stdout.strip().splitlines()
    assert "SYNTHETIC" in lines[0] and "--trace" in lines[1], output
    assert "INTERSTICE_DATA_DIR" in lines[1], output
    summary = json.loads(lines[-1])
    assert summary["demo"] == "summary" and summary["error"] is None, output
    assert summary["synthetic_trace"] is True, output
    assert summary["trace"].startswith(str(venv)), output
    assert any(job["samples_done"] > 0 for job in summary["jobs"]), output
    assert summary["harvested_node_s"] > 0, output
