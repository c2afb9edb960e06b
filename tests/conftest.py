"""Fixtures shared by every test package."""

from pathlib import Path

import pytest

from interstice import data


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
