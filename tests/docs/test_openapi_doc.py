"""The committed OpenAPI document (docs/reference/openapi.json, rendered on the Scheduler API
page) is the app's own: a changed route or schema fails here until it is regenerated."""

import difflib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

SCRIPT = Path(__file__).parents[2] / "docs" / "reference" / "gen_openapi.py"


def generator() -> ModuleType:
    """docs/reference/gen_openapi.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("gen_openapi", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_openapi_document_is_the_apps() -> None:
    gen = generator()
    expected = gen.render()
    committed = gen.OPENAPI_JSON.read_text() if gen.OPENAPI_JSON.is_file() else ""
    if committed != expected:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                expected.splitlines(keepends=True),
                "committed",
                "app",
                n=1,
            )
        )
        pytest.fail(
            f"{gen.OPENAPI_JSON} differs from the app's OpenAPI document; regenerate it with\n"
            f"    {gen.REGENERATE}\n{diff[:4000]}"
        )


def test_check_flag_names_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = generator()
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(gen, "OPENAPI_JSON", stale)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0
