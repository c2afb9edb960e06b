"""The wheel holds what an installed ``interstice`` needs outside a checkout: every example
job file with the script its ``command`` names, where its ``workdir`` points once installed
(``interstice demo`` submits them), and the service's non-Python files."""

import posixpath
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The paths in a wheel built from the tracked files (a copy: no build/ in the checkout)."""
    root = tmp_path_factory.mktemp("wheel")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
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
    (wheel,) = (root / "dist").glob("interstice-*.whl")
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
