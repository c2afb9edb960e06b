"""The code blocks of the guides (docs/user-guide/, docs/admin-guide/), read and run as a
reader would, so that the guides cannot drift from the command line.

The convention a guide page is written to, block by block in page order (one temporary folder
per page, the *page folder*, where every block runs and every file lands):

- ```` ```bash ````: a command a reader runs here and now. It is RUN with
  ``bash -euo pipefail -c`` in the page folder, within :data:`BLOCK_TIMEOUT_S`, against a live
  ``interstice serve`` (SQLite) whose nodes have real local agents, so jobs train. Each block is
  its own shell: a variable set in one block is gone in the next (write a file to carry a
  value). Environment: ``INTERSTICE_SERVER`` and ``INTERSTICE_TOKEN`` (a ``user`` token: the
  ``interstice job`` commands need no flags), ``INTERSTICE_SCHEDULER_TOKEN`` (role
  ``scheduler``, read by ``interstice slurm fill``), ``INTERSTICE_DB_URL`` (the service's
  database: ``interstice token create`` makes tokens it accepts), ``HOME`` a folder of its
  own, ``python``/``interstice``/``torchrun`` those of the tests. The page folder starts with
  ``examples/``, a link to the checkout's examples, as at a clone's root. Processes a block
  leaves behind are killed when it ends; jobs a page leaves running are cancelled after it.
- a block with ``title="path"`` (any language: ```` ```toml title="job.toml" ````): a FILE,
  written to that path in the page folder before the next blocks run (an absolute path lands
  under the page folder, ``~/`` under ``HOME``). Checked by kind: TOML job files by the loader
  of ``interstice job submit`` (a relative ``workdir`` is the file's folder), ``serve.toml``
  (or ``interstice.toml``, ``server.toml``) by the service's settings loader, ``client.toml``
  for the client config's keys; ``.py`` files compile; ``.json``, ``.yaml`` parse; shell
  scripts pass ``bash -n``. A title naming a file the package ships or renders (see
  :data:`SHIPPED`) is compared with the real content.
- ```` ```sh ````: a command for another machine (a Slurm head node, a database server, a
  container host) that cannot run here. Checked, not run: ``bash -n``, and every program it
  calls (the first word of each simple command, shell keywords, builtins and assignments
  aside; ``sudo`` is not judged, the word after it is) is on ``PATH``. A program missing
  here that CI installs from Debian (:data:`CI_PACKAGES`: slurm-wlm, munge, postgresql,
  podman) is reported and the page skipped, after every other check passed.
- ```` ```text ````: output or prose; not run. Any other language fails; so does a fence with
  no language. JSON, Python, YAML and the rest are allowed only as titled files.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from contextlib import redirect_stderr
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The checkout."""
BLOCK_TIMEOUT_S = 150.0
"""Most seconds one bash block may run."""
TAIL_CHARS = 3000
"""Characters of a failing block's output quoted in the failure."""
RUN, CHECK, OUTPUT = "bash", "sh", "text"
"""The languages of untitled blocks: run, checked, shown."""

CI_PACKAGES: dict[str, str] = {
    **dict.fromkeys(
        "sbatch squeue sinfo scontrol srun scancel sacct sacctmgr salloc sstat sprio "
        "slurmctld slurmd slurmdbd".split(),
        "slurm-wlm",
    ),
    **dict.fromkeys("munge unmunge mungekey munged".split(), "munge"),
    **dict.fromkeys(
        "psql pg_dump pg_restore pg_dumpall createdb dropdb createuser dropuser pg_isready "
        "pg_basebackup pg_ctl initdb postgres pg_ctlcluster pg_createcluster pg_lsclusters".split(),
        "postgresql",
    ),
    **dict.fromkeys("podman podman-compose".split(), "podman"),
}
"""Programs of the Debian packages that .ci/run installs, by program: a sh block calling one
that is missing here is reported as unchecked (the page skipped), not failed."""
POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin"
"""Where Debian keeps PostgreSQL's server programs (initdb, pg_ctl), off PATH."""

KEYWORDS = frozenset("if then else elif fi while until do done esac function time { } !".split())
"""Shell keywords after which a command may start."""
BUILTINS = frozenset(
    ". : [ [[ alias bg bind break builtin caller cd command compgen complete continue declare "
    "dirs disown echo enable eval exec exit export false fc fg getopts hash help history "
    "jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return "
    "set shift shopt source suspend test times trap true type typeset ulimit umask unalias "
    "unset wait".split()
)
"""bash's builtins: not programs on PATH (``command``, ``exec``: the next word is one)."""
PREFIX_WORDS = frozenset({"sudo", "exec", "command", "nohup", "env", "time", "xargs", "timeout"})
"""Words that run the next word as a program: both are checked (sudo aside)."""
OPTION_VALUES = {
    "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"},
    "env": {"-u", "-C", "-S"},
    "timeout": {"-s", "-k"},
    "xargs": {"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s"},
}
"""The options of the prefix words that take a value (``sudo -u postgres psql``)."""
NOT_JUDGED = frozenset({"sudo"})
"""Programs an admin's commands may use that this machine and CI lack (they run as root)."""
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>.*)$")
ATTRIBUTE = re.compile(r"""([A-Za-z_][\w-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|(\S+))""")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page.

    Attributes:
        language: the info string's first word, lower case (``""`` for none; a leading ``.``
            or braces as in ``{.bash}`` dropped).
        attributes: the info string's ``key="value"`` pairs (``title``).
        line: the line of the opening fence, from 1.
        text: the block's lines, the fence's indent removed, ending in a newline.
    """

    language: str
    attributes: dict[str, str]
    line: int
    text: str

    @property
    def title(self) -> str | None:
        """The ``title`` attribute: the file this block is."""
        return self.attributes.get("title")


def parse_blocks(markdown: str) -> list[Block]:
    """The fenced code blocks of a Markdown page, in order (indented fences included, as in
    lists, admonitions and tabs; a fence closes on the same character, at least as long).

    Raises:
        ValueError: a fence is never closed (naming its line).
    """
    blocks: list[Block] = []
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        start = index
        body: list[str] = []
        index += 1
        while index < len(lines):
            closing = FENCE.match(lines[index])
            if (
                closing is not None
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            line = lines[index]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            index += 1
        else:
            raise ValueError(f"line {start + 1}: code fence {fence} is never closed")
        index += 1
        info = info.strip("{}").strip()
        words = info.split(maxsplit=1)
        language = words[0].lstrip(".").lower() if words and "=" not in words[0] else ""
        attributes = {
            match[1]: next(value for value in match.groups()[1:] if value is not None)
            for match in ATTRIBUTE.finditer(info)
        }
        blocks.append(Block(language, attributes, start + 1, "".join(f"{b}\n" for b in body)))
    return blocks


# --- the files a page shows ------------------------------------------------------------


def _slurm_dir() -> Path:
    from interstice.agents.slurm.scripts import slurm_dir

    return slurm_dir()


def _lines_within(part: str, whole: str) -> bool:
    """Whether the lines of ``part`` are consecutive whole lines of ``whole``."""
    inner, outer = part.strip("\n").splitlines(), whole.strip("\n").splitlines()
    return any(outer[i : i + len(inner)] == inner for i in range(len(outer) - len(inner) + 1))


def shipped_excerpt(name: str) -> Callable[[Block], str | None]:
    """A check that a block is the shipped ``agents/slurm/<name>`` or consecutive lines of it."""

    def check(block: Block) -> str | None:
        real = (_slurm_dir() / name).read_text()
        if _lines_within(block.text, real):
            return None
        return f"not the shipped agents/slurm/{name} (nor consecutive lines of it)"

    return check


def _keys(text: str, pattern: str) -> dict[str, str]:
    """``key=value`` words of the lines that match ``pattern``."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if re.search(pattern, line):
            found.update(re.findall(r"([A-Za-z]+)=(\S+)", line))
    return found


def check_conf_fragment(block: Block) -> str | None:
    """The slurm.conf fragment of ``interstice slurm conf``, rendered with the block's own
    partition, nodes, PriorityTier, GraceTime, MaxTime, Prolog and Epilog, must be in the
    block as consecutive lines (the block may hold more of the site's slurm.conf)."""
    from interstice.agents.slurm.scripts import ScavengerPartition, render_conf_fragment

    hooks = _keys(block.text, r"^(Prolog|Epilog)=")
    partitions = [
        dict(re.findall(r"([A-Za-z]+)=(\S+)", line))
        for line in block.text.splitlines()
        if line.startswith("PartitionName=") and "GraceTime=" in line
    ]
    if not partitions or "Prolog" not in hooks or "Epilog" not in hooks:
        return (
            "no scavenger partition (a PartitionName line with GraceTime) and Prolog/Epilog "
            "lines: not the output of `interstice slurm conf`"
        )
    for values in partitions:
        try:
            expected = render_conf_fragment(
                ScavengerPartition(
                    prolog=Path(hooks["Prolog"]),
                    epilog=Path(hooks["Epilog"]),
                    partition=values["PartitionName"],
                    nodes=values.get("Nodes", "ALL"),
                    grace_s=int(values.get("GraceTime", "30")),
                    priority_tier=int(values.get("PriorityTier", "0")),
                    max_time=values.get("MaxTime", "INFINITE"),
                )
            )
        except ValueError as error:
            return f"slurm.conf values: {error}"
        if _lines_within(expected, block.text):
            return None
    return (
        "differs from `interstice slurm conf` with the same values; it prints:\n"
        + expected  # the last partition's, the likely one
    )


def check_sbatch(block: Block) -> str | None:
    """The placeholder batch script of ``interstice slurm sbatch``, rendered with the block's
    own ``#SBATCH`` job name, partition, time and output, must be in the block."""
    from interstice.agents.slurm.scripts import PlaceholderJob, render_sbatch

    options = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", block.text, re.MULTILINE))
    expected = render_sbatch(
        PlaceholderJob(
            partition=options.get("partition", "scavenger"),
            time_limit=options.get("time", "1-00:00:00"),
            output=options.get("output", "/dev/null"),
            job_name=options.get("job-name", "interstice-placeholder"),
        )
    )
    if _lines_within(expected, block.text):
        return None
    return "differs from `interstice slurm sbatch` with the same values; it prints:\n" + expected


def check_agent_conf(block: Block) -> str | None:
    """agent.conf: dotenv lines, validated by the Prolog's own model (``agent_user`` need not
    exist on this machine)."""
    from dotenv import dotenv_values
    from interstice.agents.slurm.config import AgentConf
    from pydantic import ValidationError

    with tempfile.NamedTemporaryFile("w", suffix=".conf") as handle:
        handle.write(block.text)
        handle.flush()
        values = dotenv_values(handle.name)
    values = {key: value for key, value in values.items() if key != "agent_user"}
    try:
        AgentConf.model_validate(values)
    except ValidationError as error:
        first = error.errors()[0]
        return f"agent.conf: {'.'.join(map(str, first['loc']))}: {first['msg']}"
    return None


SHIPPED: dict[str, Callable[[Block], str | None]] = {
    "prolog.sh": shipped_excerpt("prolog.sh"),
    "epilog.sh": shipped_excerpt("epilog.sh"),
    "hook.sh": shipped_excerpt("hook.sh"),
    "placeholder.sbatch": check_sbatch,
    "slurm.conf": check_conf_fragment,
    "slurm.conf.fragment": check_conf_fragment,
    "scavenger.conf": check_conf_fragment,
    "agent.conf": check_agent_conf,
}
"""Titles (their last path component) of files the package ships or renders, and how a block
so titled is compared with the real content: the Slurm hooks are the shipped files (or
consecutive lines of them); slurm.conf and the placeholder script are what ``interstice slurm
conf``/``sbatch`` print for the block's own values; agent.conf passes the Prolog's loader."""
SERVICE_TOMLS = frozenset({"serve.toml", "server.toml", "interstice.toml"})
"""TOML titles read as the service's ``--config`` file rather than as job files."""
CLIENT_TOMLS = frozenset({"client.toml"})
"""TOML titles read as the ``interstice job`` client's config file."""


def check_toml(path: Path) -> str | None:
    """A titled TOML file, as the command that reads it would: a job file by default."""
    try:
        document = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        return f"not TOML: {error}"
    if path.name in SERVICE_TOMLS:
        from interstice.api.settings import load_settings
        from pydantic import ValidationError

        try:
            load_settings(path)
        except ValidationError as error:
            first = error.errors()[0]
            return f"service setting {'.'.join(map(str, first['loc']))}: {first['msg']}"
        return None
    if path.name in CLIENT_TOMLS:
        unknown = sorted(set(document) - {"server", "token"})
        return f"client config: unknown keys {unknown} (keys: server, token)" if unknown else None
    return _job_file_error(path)


def _job_file_error(path: Path) -> str | None:
    """What ``interstice job submit PATH`` says of the file before sending it, or None."""
    import typer

    from interstice.client_cli import read_job_file, validate_job

    said = StringIO()
    try:
        with redirect_stderr(said):
            document = read_job_file(path)
            document.setdefault("workdir", str(path.parent))  # as submit does (its cwd)
            validate_job(document, path.name)
    except typer.Exit:
        return f"job file: {said.getvalue().strip()}"
    return None


def check_file(block: Block, path: Path) -> str | None:
    """A titled block, written at ``path``: compared or validated by its kind."""
    name = path.name
    if name in SHIPPED:
        return SHIPPED[name](block)
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml" or block.language == "toml":
            return check_toml(path)
        if suffix == ".py" or block.language == "python":
            compile(block.text, str(path), "exec")
        elif suffix == ".json" or block.language == "json":
            json.loads(block.text)
        elif suffix in (".yaml", ".yml") or block.language in ("yaml", "yml"):
            import yaml

            yaml.safe_load(block.text)
        elif suffix in (".sh", ".bash") or block.language in ("sh", "bash"):
            return _syntax_error(block.text)
    except (SyntaxError, ValueError) as error:  # json/yaml errors are ValueErrors
        return f"does not parse: {error}"
    except ImportError as error:
        return f"cannot check: {error}"
    return None


# --- sh blocks -------------------------------------------------------------------------


def _syntax_error(script: str) -> str | None:
    checked = subprocess.run(
        ["bash", "-n"], input=script, capture_output=True, text=True, timeout=30, check=False
    )
    return None if checked.returncode == 0 else f"bash -n: {checked.stderr.strip()}"


def _open_quote(text: str) -> bool:
    """Whether ``text`` ends inside a single- or double-quoted string (a ``#`` comment
    outside quotes ends the line's scan)."""
    quote = ""
    escaped = False
    previous = " "
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and previous.isspace():
            return False
        previous = char
    return bool(quote)


def _logical_lines(script: str) -> list[str]:
    """The script's commands a line each: continuations and quoted strings that span lines
    joined, here-document bodies dropped."""
    lines: list[str] = []
    pending = ""
    heredoc: str | None = None
    for raw in script.splitlines():
        if heredoc is not None:
            if raw.strip() == heredoc:
                heredoc = None
            continue
        if raw.endswith("\\") and not _open_quote(pending + raw):
            pending += raw[:-1] + " "
            continue
        line = pending + raw
        if _open_quote(line):
            pending = line + "\n"
            continue
        pending = ""
        marker = re.search(r"<<-?\s*(['\"]?)([A-Za-z_]\w*)\1", line)
        if marker:
            heredoc = marker[2]
        lines.append(line)
    if pending:
        lines.append(pending)
    return lines


def programs(script: str) -> list[str]:
    """The programs a shell script calls: the first word of each simple command (and of
    ``$(...)`` substitutions), less shell keywords, builtins and assignments; the word after
    ``sudo``, ``env``, ``nohup``, ``exec``, ``timeout``... too. A heuristic for examples, not a
    shell parser: words with ``$`` (a program in a variable) are not judged."""
    found: list[str] = []
    for line in _logical_lines(script):
        line = re.sub(r"\$\(\([^()]*(\([^()]*\)[^()]*)*\)\)", "ARITH", line)  # $((...))
        pieces = [line, *re.findall(r"\$\(([^()]*)\)", line), *re.findall(r"`([^`]*)`", line)]
        for piece in pieces:
            piece = re.sub(r"\$\([^()]*\)|`[^`]*`", "SUBST", piece)
            lexer = shlex.shlex(piece, posix=True, punctuation_chars=";&|()<>")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            try:
                words = list(lexer)
            except ValueError:  # an unbalanced quote: bash -n has said so
                continue
            found.extend(_first_words(words))
    return found


def _first_words(words: list[str]) -> list[str]:
    found: list[str] = []
    at_start, in_for, skip_next = True, False, False
    prefix: str | None = None  # the prefix word (sudo, env...) whose program comes next
    for word in words:
        if skip_next:  # a redirection's target, or an option's value
            skip_next = False
            continue
        if set(word) <= set(";&|()"):
            at_start, in_for, prefix = True, False, None
            continue
        if set(word) <= set("<>&"):
            skip_next = True
            continue
        if in_for:
            if word == "do":
                in_for, at_start = False, True
            continue
        if not at_start:
            continue
        if word in ("for", "select", "case"):
            in_for = True
            continue
        if ASSIGNMENT.match(word) or re.fullmatch(r"\d*[<>].*", word):
            continue
        if prefix is not None and word.startswith("-"):
            skip_next = word in OPTION_VALUES.get(prefix, ())
            continue
        if prefix == "timeout" and re.fullmatch(r"[\d.]+[smhd]?", word):
            continue
        if word in KEYWORDS:
            continue
        if word in BUILTINS:
            prefix = word if word in PREFIX_WORDS else None
            at_start = prefix is not None
            continue
        if "$" in word or word in ("SUBST", "ARITH"):
            at_start = False
            continue
        found.append(word)
        prefix = word if word in PREFIX_WORDS else None
        at_start = prefix is not None
    return found


def _on_path(program: str, path: str) -> bool:
    if "/" in program:  # a path: the pages run from the checkout's root
        return os.access(REPO / program, os.X_OK)
    if shutil.which(program, path=path):
        return True
    if CI_PACKAGES.get(program) == "postgresql":
        return any(Path(folder, program).exists() for folder in _glob(POSTGRES_BIN_GLOB))
    return False


def _glob(pattern: str) -> list[str]:
    import glob

    return glob.glob(pattern)


# --- running a page --------------------------------------------------------------------


@dataclass
class PageResult:
    """What a page's blocks came to.

    Attributes:
        failures: one message per failed block: ``page:line: why``.
        unchecked: programs of sh blocks missing here that CI installs (``page:line: ...``).
        ran: bash blocks that ran and passed.
    """

    failures: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    ran: int = 0


def page_name(page: Path) -> str:
    """The page's path as the failure messages give it: relative to the checkout."""
    try:
        return str(page.resolve().relative_to(REPO))
    except ValueError:
        return str(page)


def needs_service(page: Path) -> bool:
    """Whether the page has a bash block (only those need the live service)."""
    return any(b.language == RUN and b.title is None for b in parse_blocks(page.read_text()))


def block_env(folder: Path, service: dict[str, str] | None) -> dict[str, str]:
    """The environment of a page's bash blocks: this one less every ``INTERSTICE_*``
    variable, a ``HOME`` of the page's own, the tests' interpreter first on ``PATH``, and the
    service's variables (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERSTICE_")}
    home = folder / ".home"
    home.mkdir(exist_ok=True)
    env["HOME"] = str(home)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env.update(service or {})
    return env


def run_bash(script: str, folder: Path, env: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """Run ``script`` with ``bash -euo pipefail -c`` in ``folder``; its exit code (-1 on a
    time-out) and output (stdout and stderr together). Whatever it started is killed at
    its end (its own process group)."""
    with tempfile.TemporaryFile("w+b") as output:
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = -1
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        output.seek(0)
        return code, output.read().decode(errors="replace")


def place(title: str, folder: Path) -> Path:
    """Where a titled block is written: relative to the page folder; ``~/`` under the page's
    HOME; an absolute path under the page folder."""
    if title.startswith("~/"):
        return folder / ".home" / title[2:]
    return folder / title.lstrip("/")


def run_page(
    page: Path,
    folder: Path,
    service: dict[str, str] | None = None,
    timeout_s: float = BLOCK_TIMEOUT_S,
) -> PageResult:
    """Check and run every block of ``page`` in ``folder`` (see the module docstring).

    Static checks go on after a failure so that one run lists them all; the bash blocks stop
    at the first that fails, since the next ones build on it.

    Args:
        page: the Markdown page.
        folder: the page folder (created).
        service: the live service's variables for the bash blocks.
        timeout_s: most seconds per bash block.
    """
    name = page_name(page)
    result = PageResult()
    folder.mkdir(parents=True, exist_ok=True)
    examples = folder / "examples"
    if not examples.exists():
        examples.symlink_to(REPO / "examples", target_is_directory=True)
    env = block_env(folder, service)
    try:
        blocks = parse_blocks(page.read_text())
    except ValueError as error:
        return PageResult(failures=[f"{name}: {error}"])
    bash_failed = False
    for block in blocks:
        where = f"{name}:{block.line}"
        if block.title is not None:
            path = place(block.title, folder)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text)
            if (why := check_file(block, path)) is not None:
                result.failures.append(f"{where}: {block.language or 'file'} {block.title}: {why}")
        elif block.language == RUN:
            if bash_failed:
                continue
            code, output = run_bash(block.text, folder, env, timeout_s)
            if code == 0:
                result.ran += 1
                continue
            bash_failed = True
            how = f"timed out after {timeout_s:g} s" if code == -1 else f"exit code {code}"
            result.failures.append(
                f"{where}: bash block failed ({how}):\n{_indent(block.text)}"
                f"--- output tail:\n{_indent(output[-TAIL_CHARS:])}"
            )
        elif block.language == CHECK:
            if (why := _syntax_error(block.text)) is not None:
                result.failures.append(f"{where}: sh block: {why}")
                continue
            for program in dict.fromkeys(programs(block.text)):
                if program in NOT_JUDGED or _on_path(program, env["PATH"]):
                    continue
                if program in CI_PACKAGES:
                    result.unchecked.append(
                        f"{where}: {program} not on PATH here (Debian {CI_PACKAGES[program]}, "
                        "installed by CI)"
                    )
                else:
                    result.failures.append(
                        f"{where}: sh block calls {program!r}, which is not on PATH (nor a "
                        "program of the Debian packages CI installs)"
                    )
        elif block.language == OUTPUT:
            continue
        elif not block.language:
            result.failures.append(
                f"{where}: a code block without a language: bash (run), sh (checked), text "
                '(shown), or a file with title="path"'
            )
        else:
            result.failures.append(
                f"{where}: a {block.language} block without a title: only bash (run), sh "
                f'(checked) and text (shown) may be untitled; give a file title="path"'
            )
    return result


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.splitlines())
