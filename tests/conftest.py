"""Fixtures shared by every test package."""

from pathlib import Path

import pytest

from interstice import data

SERIAL_MODULES = (
    "system",
    "test_containers.py",
    "test_demo.py",
    "agents/test_slurm_hooks.py",
    "agents/test_slurm_real.py",
    "agents/test_run_as_owner.py",
    "cli/test_munge_cli.py",
)
"""Modules (or folders), relative to ``tests/``, that start real daemons (Slurm, munged, podman)
or signal processes they find by their environment: they run in the serial lane whatever
their marks (see :func:`pytest_collection_modifyitems`)."""


LANES = 2
"""pytest-xdist workers of a whole-suite run: one per lane (the VM's 2 cores)."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads these options
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Run the whole suite (``python -m pytest``, no paths given) as ``-n 2 --dist loadgroup``
    where pytest-xdist is installed and no ``-n``/``--dist`` is given: the two lanes of
    :func:`pytest_collection_modifyitems` side by side. A run of some paths (a module, a
    folder) stays in one process, which starts faster than two workers do."""
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    if (
        whole_suite
        and not hasattr(config, "workerinput")  # a worker runs what its controller sends
        and config.pluginmanager.hasplugin("xdist")
        and config.option.numprocesses is None
        and config.option.dist == "no"
    ):
        config.option.numprocesses = LANES
        config.option.dist = "loadgroup"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each test in one of two lanes, which pytest-xdist (``--dist loadgroup``, see
    :func:`pytest_cmdline_main`) runs side by side, each in its own worker, in collection order.

    The ``serial`` lane holds the ``slow`` tests (several processes, grace periods and
    timeouts met on this machine) and :data:`SERIAL_MODULES`: they run one at a time, as
    without xdist. The ``rest`` lane holds the other tests, most of them in one process.
    A test that names its own ``xdist_group`` keeps it. Without xdist the marks do nothing.
    """
    tests = Path(__file__).parent
    for item in items:
        if item.get_closest_marker("xdist_group") or not item.path.is_relative_to(tests):
            continue
        path = item.path.relative_to(tests).as_posix()
        serial = item.get_closest_marker("slow") or path.startswith(SERIAL_MODULES)
        item.add_marker(pytest.mark.xdist_group("serial" if serial else "rest"))


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
    next fix needs."""
    reruns = terminalreporter.stats.get("rerun", [])
    if reruns:
        terminalreporter.section("failures before a rerun")
        for report in reruns:
            terminalreporter.write_sep("_", report.nodeid)
            terminalreporter.write_line(report.longreprtext)
