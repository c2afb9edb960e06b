"""A ``torch`` package of the test's own, first on the ``PYTHONPATH`` that the agent's
launchers inherit: a Python that cannot import torch, or whose import of it never ends."""

import os
from pathlib import Path

import pytest

NO_TORCH = 'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n'
"""What a Python without torch raises at ``import torch``."""
SLOW_TORCH = "import time\ntime.sleep(600)\n"
"""An import of torch that never ends."""


def shadow_torch(folder: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> Path:
    """Put a ``torch`` package that runs ``code`` on import in ``folder/shadow`` and first on
    ``PYTHONPATH``; returns the package's folder (removing it brings the real torch back)."""
    package = folder / "shadow" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(code)
    paths = [str(package.parent), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    return package
