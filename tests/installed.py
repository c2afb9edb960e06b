"""Skipping a test module whose optional dependency is absent, without importing it.

``pytest.importorskip`` imports the package to find it, and every pytest-xdist worker collects
every module: Lightning, scikit-learn or transformers, which their tests use in subprocesses
or inside a test only, cost each worker seconds before its first test.
"""

from importlib.util import find_spec

import pytest


def skip_unless_installed(package: str, reason: str) -> None:
    """Skip the calling test module (at its top level) where ``package``, a top-level
    package name, is not installed; nothing is imported.

    Args:
        package: the import name, e.g. ``"sklearn"``.
        reason: the skip message, naming how to install it.
    """
    if find_spec(package) is None:
        pytest.skip(reason, allow_module_level=True)
