"""The browser tests' fixtures: a headless chromium per module and the screenshots' folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pages import chrome


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = chrome()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``$INTERSTICE_UI_SCREENSHOTS``, default ``<pytest basetemp>/ui-screenshots``."""
    folder = Path(
        os.environ.get("INTERSTICE_UI_SCREENSHOTS")
        or tmp_path_factory.getbasetemp() / "ui-screenshots"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder
