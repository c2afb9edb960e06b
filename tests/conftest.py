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
