"""Fixtures shared by every test package."""

from pathlib import Path
from typing import Any

import pytest

from interstice import data

SERIAL_MODULES = (
    "system",
    "test_containers.py",
    "test_demo.py",
    "agents/test_slurm_hooks.py",
    "agents/test_slurm_real.py",
    "agents/test_run_as_owner.py",
    "agents/test_owner_setup.py",
    "api/test_munge_auth.py",
    "cli/test_munge_cli.py",
)
"""Modules (or folders), relative to ``tests/``, that start real daemons (Slurm, munged, podman),
add and delete Unix accounts (a deleted account's uid is the next one ``useradd`` gives) or
signal processes they find by their environment: they run in the serial lane (see
:func:`lane`)."""


LANES = 2
"""pytest-xdist workers of a whole-suite run (the VM's 2 cores)."""

SLOWEST_SHOWN = 25
"""The slowest steps a whole-suite run lists (``--durations``), unless told otherwise."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads these options
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Run the whole suite (``python -m pytest``, no paths given) as ``-n 2 --dist loadgroup``
    where pytest-xdist is installed and no ``-n``/``--dist`` is given: the serial lane of
    :func:`lane` beside the other modules, listing its :data:`SLOWEST_SHOWN` slowest steps.
    A run of some paths (a module, a folder) stays in one process, which starts faster than
    two workers do."""
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        # a pytest-xdist worker parses the command line again, which names no --dist for the
        # whole suite: told by pytest_configure_node, it marks each test's node id with its
        # group as under --dist loadgroup, so that the controller keeps the lanes
        config.option.loadgroup = worker.get(DIST_KEY) == "loadgroup"
        return
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    if (
        whole_suite
        and config.pluginmanager.hasplugin("xdist")
        and config.option.numprocesses is None
        and config.option.dist == "no"
    ):
        config.option.numprocesses = LANES
        config.option.dist = "loadgroup"
        if config.option.durations is None:
            config.option.durations = SLOWEST_SHOWN


DIST_KEY = "interstice_dist"
"""The key of a worker's ``workerinput`` that holds the controller's ``--dist``."""


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without the plugin
def pytest_configure_node(node: Any) -> None:
    """Pass the controller's ``--dist`` to each pytest-xdist worker (see
    :func:`pytest_cmdline_main`)."""
    node.workerinput[DIST_KEY] = node.config.option.dist


SERIAL_LANE = "serial"
"""The ``xdist_group`` of the tests that run one at a time (see :func:`lane`)."""


def lane(item: pytest.Item) -> str | None:
    """The ``xdist_group`` a test runs in under ``--dist loadgroup``, or None for a test
    outside ``tests/`` or one that names its own group.

    - :data:`SERIAL_LANE`: the tests of :data:`SERIAL_MODULES`, one at a time, as without
      xdist.
    - Any other test: its module's path. pytest-xdist hands whole modules to whichever worker
      is free (largest first), so the modules fill both workers around the serial lane, and a
      module's fixtures (a built wheel, a populated service, a Slurm cluster) are set up in
      one worker only.
    """
    tests = Path(__file__).parent
    if item.get_closest_marker("xdist_group") or not item.path.is_relative_to(tests):
        return None
    path = item.path.relative_to(tests).as_posix()
    return SERIAL_LANE if path.startswith(SERIAL_MODULES) else path


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its :func:`lane`, which pytest-xdist (``--dist loadgroup``, see
    :func:`pytest_cmdline_main`) keeps in one worker. Without xdist the marks do nothing."""
    for item in items:
        group = lane(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def bftrainer_dir() -> Path:
    """The real BFTrainer data folder; skips the test where it is absent."""
    folder = data.data_dir()
    if not (folder / data.TRACE_FILE).is_file():
        pytest.skip(f"real data absent: {folder} has no {data.TRACE_FILE} (see README)")
    return folder


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the failure of each test that pytest-rerunfailures ran again (the pilot may rerun
    once): the plugin keeps only the test's name, and the cause of a flaky failure is what the
    next fix needs. Under xdist, also print each worker's busy seconds and the serial lane's,
    which say whether the lanes are balanced."""
    reruns = terminalreporter.stats.get("rerun", [])
    if reruns:
        terminalreporter.section("failures before a rerun")
        for report in reruns:
            terminalreporter.write_sep("_", report.nodeid)
            terminalreporter.write_line(report.longreprtext)
    busy: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            worker = getattr(report, "node", None)
            if isinstance(report, pytest.TestReport) and worker is not None:
                name = worker.gateway.id
                busy[name] = busy.get(name, 0.0) + report.duration
                if report.nodeid.endswith(f"@{SERIAL_LANE}"):
                    busy[SERIAL_LANE] = busy.get(SERIAL_LANE, 0.0) + report.duration
    if busy:
        terminalreporter.write_line(
            "busy seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(busy.items()))
        )
