"""MkDocs hook: let mkdocstrings find ``interstice.*`` where the installed package has it.

pyproject.toml maps the checkout's folders (``optimizer/``, ``replay/``, ``elastic/``, ...) to
``interstice.*`` with setuptools ``package-dir``, a layout that griffe's static finder does not
follow. At start this hook builds the package tree as installed, in a temporary folder, out of
symbolic links to the checkout's files, and puts it first on the python handler's search
paths. Nothing is imported and nothing leaves the checkout.
"""

import atexit
import shutil
import tempfile
import tomllib
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: docs/hooks/ is two folders below it."""


def package_tree(root: Path, into: Path) -> None:
    """Link ``root``'s folders into ``into`` as the packages ``package-dir`` maps them to.

    Args:
        root: the checkout (holds pyproject.toml).
        into: an empty folder; ``into/interstice`` becomes the installed package's layout.
    """
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    package_dir = pyproject["tool"]["setuptools"]["package-dir"]
    top = into / "interstice"
    top.mkdir()
    mapped = {name.split(".", 1)[1] for name in package_dir if name.startswith("interstice.")}
    for entry in (root / package_dir["interstice"]).iterdir():
        if entry.name != "__pycache__" and entry.name not in mapped:
            (top / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    for name, folder in package_dir.items():
        if name.startswith("interstice."):
            link = into.joinpath(*name.split("."))
            link.symlink_to(root / folder, target_is_directory=True)


@event_priority(100)  # before mkdocstrings reads its handlers' settings
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    tree = Path(tempfile.mkdtemp(prefix="interstice-docs-"))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)
    package_tree(ROOT, tree)
    handlers = config.plugins["mkdocstrings"].config["handlers"]
    python = handlers.setdefault("python", {})
    python["paths"] = [str(tree), *python.get("paths", [])]
    return config
