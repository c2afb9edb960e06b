"""Docs and code name no issue numbers: a guide, a docstring or a comment says what the code
does and why, and the tracker's numbering means nothing to a reader of a release.

Scans the tracked text files of the README, ``docs/`` and the code folders for references
to the tracker (the word issue or issues, or PR, followed by a number, or a number after a
bare hash sign in prose; the test cases below show each form), and fails naming every
``file:line``. The CHANGELOG is not scanned: it is the project's record by
release.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

SCANNED = (
    "README.md",
    "docs",
    "optimizer",
    "api",
    "agents",
    "elastic",
    "models",
    "replay",
    "interstice",
    "bench",
    "examples",
    "tests",
    "containers",
    ".ci",
)
"""Paths (files or folders) whose tracked files are scanned, relative to the repository root."""

SKIPPED_PARTS = ("vendor",)
"""Folder names whose files are someone else's (vendored, minified) and not scanned."""

# Written with character classes so that this file's own text does not match them.
ISSUE_WORD = re.compile(
    r"\b[Ii][Ss][Ss][Uu][Ee][Ss]?[ \t]*(?:\n[ \t]*)?[#]?\d+"  # the word, an optional hash, a number
    r"|\b(?:[Pp]ull [Rr]equest|PR)[ \t]*[#]\d+"  # a pull request by its number
)
BARE_NUMBER = re.compile(r"(?<![\w&#\"'/=$-])[#]\d{1,5}(?![\w-])")
"""A hash sign and a number in prose: not a colour in quotes, an HTML entity, a URL or an
anchor."""

NO_BARE_NUMBER_SUFFIXES = frozenset({".css", ".js", ".json", ".html", ".svg"})
"""Files where a hash sign and digits are a colour or a fragment, not prose: only ISSUE_WORD
applies."""


def references(text: str, suffix: str = ".md") -> list[re.Match[str]]:
    """The issue references in ``text`` of a file named ``*suffix``, in order."""
    found = list(ISSUE_WORD.finditer(text))
    if suffix not in NO_BARE_NUMBER_SUFFIXES:
        found += BARE_NUMBER.finditer(text)
    return sorted(found, key=lambda match: match.start())


def tracked_files() -> list[Path]:
    """The scanned paths' files that git tracks, as absolute paths."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", *SCANNED],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = [ROOT / name for name in out.split("\0") if name]
    return [f for f in files if f.is_file() and not set(SKIPPED_PARTS) & set(f.parts)]


def issue_references(path: Path) -> list[str]:
    """``file:line: text`` for every issue reference in ``path``; none in a binary file."""
    data = path.read_bytes()
    if b"\0" in data:
        return []
    text = data.decode("utf-8", errors="replace")
    found = []
    for match in references(text, path.suffix):
        line_no = text.count("\n", 0, match.start()) + 1
        line = text.splitlines()[line_no - 1].strip()
        found.append(f"{path.relative_to(ROOT)}:{line_no}: {line[:120]}")
    return found


# The examples are built from these so that this file's own text holds none of them.
ISSUE = "issue"
HASH = "#"


@pytest.mark.parametrize(
    "text",
    [
        f"Measured for {ISSUE} 23, on the VM.",
        f"as {ISSUE}s 13 and 25 asked",
        f"{ISSUE.title()} {HASH}7: the service",
        f"the goals of {ISSUE}\n11",
        f"see PR {HASH}9",
        f"fixed in {HASH}42.",
        f"a bug ({HASH}12) in prose",
    ],
)
def test_the_pattern_finds_a_reference(text: str) -> None:
    assert references(text), text


@pytest.mark.parametrize(
    ("text", "suffix"),
    [
        (f'stroke: "{HASH}333"', ".js"),
        (f"color: {HASH}000;", ".css"),
        (f"&{HASH}39; and &{HASH}x27;", ".md"),
        (f"see docs/concepts.md{HASH}the-metrics and [a]({HASH}1-intro)", ".md"),
        (f"1,001 jobs, 12 {ISSUE}s found", ".md"),
        (f"t{ISSUE} 3 and re{ISSUE} 4", ".md"),
        (f"{HASH} 12 jobs, a comment", ".py"),
    ],
)
def test_the_pattern_leaves_other_text(text: str, suffix: str) -> None:
    assert not references(text, suffix), text


def test_a_planted_reference_is_named_by_file_and_line(tmp_path: Path, monkeypatch) -> None:
    planted = tmp_path / "planted.md"
    planted.write_text(f"{HASH} A page\n\nFirst line.\nThis was measured for {ISSUE} 42.\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert issue_references(planted) == [f"planted.md:4: This was measured for {ISSUE} 42."]


def test_this_file_passes_its_own_scan() -> None:
    assert issue_references(Path(__file__)) == []


def test_docs_and_code_name_no_issue_numbers() -> None:
    files = tracked_files()
    assert any(f.name == "README.md" for f in files), "the scan found no README.md"
    found = [ref for path in files for ref in issue_references(path)]
    assert not found, "issue numbers in docs or code (describe the change instead):\n" + (
        "\n".join(found)
    )
