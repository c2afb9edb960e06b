"""What each package may import, read from the source (an AST scan: nothing is imported).

One row of :data:`RULES` per package (or shared module): the ``interstice`` modules it may
import besides its own, and which third-party packages it may (``only``) or must not
(``never``) import. A module is checked against every row whose package contains it, so a
layer of the service (``interstice.api.services``) keeps the service's rule (no torch) and
adds its own. Imports under ``if TYPE_CHECKING:`` count like any other. Each package's
``__init__`` docstring states its row in words and names what the row allows
(:func:`test_docstrings_state_the_rules`); the shared modules' rows are stated in
``interstice/__init__.py``.
"""

import ast
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

TORCH = ("torch", "torchvision")
WEB = ("fastapi", "starlette", "uvicorn")
DB = ("sqlalchemy", "alembic", "psycopg")


@dataclass(frozen=True)
class Rule:
    """What the modules of ``package`` may import.

    Attributes:
        package: a package (every module under it) or a single module.
        internal: ``interstice`` modules or packages it may import besides its own.
        only: where not None, the only third-party top-level packages it may import.
        never: third-party top-level packages it must not import.
    """

    package: str
    internal: tuple[str, ...]
    only: tuple[str, ...] | None = None
    never: tuple[str, ...] = ()


RULES = (
    # the shared facts every process imports: the standard library only (errors: typer)
    Rule("interstice.wire", (), only=()),
    Rule("interstice.files", (), only=()),
    Rule("interstice.ports", (), only=()),
    Rule("interstice.data", (), only=()),
    Rule("interstice.errors", (), only=("typer",)),
    # the allocation engine: pure
    Rule("interstice.optimizer", (), only=("numpy", "ortools", "pulp", "pydantic")),
    Rule(
        "interstice.replay",
        ("interstice.optimizer", "interstice.data", "interstice.errors"),
        never=TORCH + WEB + DB + ("httpx",),
    ),
    # the service and its layers
    Rule(
        "interstice.api",
        (
            "interstice.optimizer",
            "interstice.wire",
            "interstice.data",
            "interstice.errors",
            "interstice.munge",
        ),
        never=TORCH,
    ),
    Rule("interstice.api.schemas", ("interstice.wire",), only=("pydantic", "pydantic_core")),
    Rule("interstice.api.store", ("interstice.api.settings",), never=WEB),
    Rule(
        "interstice.api.auth",
        ("interstice.api.store", "interstice.api.schemas", "interstice.munge"),
    ),
    Rule(
        "interstice.api.services",
        (
            "interstice.api.store",
            "interstice.api.schemas",
            "interstice.api.auth",
            "interstice.api.limits",
            "interstice.api.service",
            "interstice.optimizer",
            "interstice.wire",
        ),
        never=WEB,
    ),
    Rule(
        "interstice.api.control",
        (
            "interstice.api.services",
            "interstice.api.store",
            "interstice.api.settings",
            "interstice.api.schemas",
            "interstice.api.service",
            "interstice.optimizer",
        ),
        never=WEB,
    ),
    Rule(
        "interstice.api.routes",
        (
            "interstice.api.deps",
            "interstice.api.service",
            "interstice.api.services",
            "interstice.api.schemas",
            "interstice.api.auth",
        ),
    ),
    # the training side
    Rule("interstice.elastic", ("interstice.wire", "interstice.files"), only=("torch",)),
    Rule(
        "interstice.agents",
        (
            "interstice.models",
            "interstice.elastic",
            "interstice.wire",
            "interstice.files",
            "interstice.errors",
            "interstice.ports",
        ),
        never=WEB + DB,
    ),
    Rule(
        "interstice.agents.slurm",
        ("interstice.agents", "interstice.wire", "interstice.errors", "interstice.ports"),
        never=TORCH,
    ),
    Rule(
        "interstice.models",
        ("interstice.wire", "interstice.errors", "interstice.ports"),
        never=WEB + DB + ("httpx",),
    ),
)
"""The import rules. ``interstice/cli.py`` and ``interstice.demo`` assemble every package
and ``examples/`` are users' scripts: they have no row."""

# Modules that may import a training framework beyond their row's ``only`` (one module per
# framework, so that nothing else in their package imports it).
FRAMEWORK_MODULES = {
    "interstice.elastic.lightning": ("lightning",),
    "interstice.elastic.hf": ("transformers",),
    "interstice.elastic.accelerate": ("accelerate", "numpy"),
}


def _package_dirs() -> dict[str, Path]:
    """pyproject's ``package-dir``: import name -> folder."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    mapping = pyproject["tool"]["setuptools"]["package-dir"]
    return {name: REPO / folder for name, folder in mapping.items()}


def _source(package: str) -> Path:
    """The folder of a package, or the file of a module."""
    dirs = _package_dirs()
    home = max((name for name in dirs if _under(package, (name,))), key=len)
    path = dirs[home].joinpath(*package[len(home) :].split(".")[1:])
    return path if path.is_dir() else path.with_suffix(".py")


def _modules(package: str) -> dict[str, Path]:
    """Every module of ``package`` (itself when it is a module): name -> file."""
    source = _source(package)
    if source.is_file():
        return {package: source}
    modules = {}
    for path in sorted(source.rglob("*.py")):
        parts = path.relative_to(source).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((package, *parts))] = path
    return modules


def imports(module: str, path: Path) -> list[tuple[int, str]]:
    """``(line, name)`` of every import of the file, relative ones resolved against
    ``module``: ``from a.b import c`` gives ``a.b.c`` when ``a.b`` is an ``interstice``
    package (``c`` is a submodule or one of its names: both are under ``a.b``), else ``a.b``."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parent = parts[: len(parts) - node.level + is_package]
                base = ".".join([*parent, *([base] if base else [])])
            if base.split(".")[0] == "interstice" and _source(base).is_dir():
                found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, base))
    return found


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(rule: Rule, module: str, path: Path) -> list[str]:
    """What ``module`` (a file of ``rule.package``) imports against ``rule``."""
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    found = []
    for line, name in imports(module, path):
        top = name.split(".")[0]
        where = f"{shown}:{line} imports {name}"
        if top == "interstice":
            if not _under(name, (rule.package, *rule.internal)):
                found.append(f"{where}: {rule.package} may import only {rule.internal}")
        elif top in sys.stdlib_module_names or top == "__future__":
            continue
        elif rule.only is not None and top not in rule.only + FRAMEWORK_MODULES.get(module, ()):
            found.append(f"{where}: {rule.package}'s third-party imports are only {rule.only}")
        elif top in rule.never:
            found.append(f"{where}: {rule.package} never imports {top}")
    return found


@pytest.mark.parametrize("rule", RULES, ids=[rule.package for rule in RULES])
def test_imports_keep_the_rules(rule: Rule) -> None:
    modules = _modules(rule.package)
    assert modules, f"{rule.package}: no module found at {_source(rule.package)}"
    found = [v for module, path in modules.items() for v in violations(rule, module, path)]
    assert not found, "\n".join(found)


def test_a_forbidden_import_is_found(tmp_path: Path) -> None:
    """The scan sees an import anywhere in a module: in a function, under TYPE_CHECKING,
    relative."""
    (tmp_path / "solve.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import numpy\n"
        "if TYPE_CHECKING:\n"
        "    from interstice.api.service import Service\n"
        "def f():\n"
        "    import torch.distributed\n"
        "    from .. import replay\n"
        "    from . import problem\n"
    )
    rule = next(rule for rule in RULES if rule.package == "interstice.optimizer")
    found = violations(rule, "interstice.optimizer.solve", tmp_path / "solve.py")
    assert [v.split(" imports ")[1].split(":")[0] for v in found] == [
        "interstice.api.service",
        "torch.distributed",
        "interstice.replay",
    ]


def _docstring_home(rule: Rule) -> Path:
    source = _source(rule.package)
    return source / "__init__.py" if source.is_dir() else _source("interstice") / "__init__.py"


@pytest.mark.parametrize("rule", RULES, ids=[rule.package for rule in RULES])
def test_docstrings_state_the_rules(rule: Rule) -> None:
    """The package's docstring (the shared modules': ``interstice``'s) names every
    ``interstice`` module its row allows and every third-party package of its ``only``."""
    home = _docstring_home(rule)
    docstring = ast.get_docstring(ast.parse(home.read_text())) or ""
    named = [*rule.internal, *(rule.only or ())]
    if home.parent != _source(rule.package):
        named.append(rule.package)
    missing = [name for name in named if name not in docstring]
    assert not missing, f"{home.relative_to(REPO)}'s docstring does not name {missing}"
