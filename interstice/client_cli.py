"""``interstice job``: submit, follow and cancel your training jobs, like ``sbatch``/``squeue``.

Every command talks to the service's REST API (``/v1/jobs``) as a user. The server URL and
the token come from, highest first: the ``--server``/``--token`` flags, the
``INTERSTICE_SERVER``/``INTERSTICE_TOKEN`` variables, a TOML file (``INTERSTICE_CONFIG``,
else ``~/.config/interstice/client.toml``) with the keys ``server`` and ``token``. A config
file holding a token must be readable by its owner alone (``chmod 600``), as ssh requires of
a private key; otherwise it is refused.

Without a token, on a host with munged (a login node of a cluster that runs MUNGE), every
request carries a fresh MUNGE credential of the caller's uid instead (:mod:`interstice.munge`;
munged's socket from ``INTERSTICE_MUNGE_SOCKET``, else its default).

Exit codes: 0 success; 2 bad input (a bad flag, job file or config, or an HTTP 4xx answer:
one line with the service's detail); 1 the service is unreachable or answered 5xx, or
``wait`` saw the job fail or be cancelled; 124 ``wait`` timed out.

A job file holds the fields of ``POST /v1/jobs`` (:class:`interstice.api.schemas.jobs.JobCreate`)
as TOML keys; it is validated here first, so a bad or unknown key is one line naming it.
"""

import json
import math
import os
import shlex
import stat
import sys
import time
import tomllib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from interstice import munge
from interstice.errors import fail

job_app = typer.Typer(
    help="Submit your training script as a job and follow it (like sbatch/squeue).",
    no_args_is_help=True,
)

ENV_SERVER = "INTERSTICE_SERVER"
ENV_TOKEN = "INTERSTICE_TOKEN"
ENV_CONFIG = "INTERSTICE_CONFIG"
DEFAULT_SERVER = "http://127.0.0.1:8000"  # where ``interstice serve`` listens by default
CONFIG_KEYS = ("server", "token")
ENDED_STATES = ("finished", "cancelled", "failed")
EXIT_ERROR = 1  # the service unreachable or 5xx; ``wait``: the job failed or was cancelled
EXIT_TIMEOUT = 124  # ``wait --timeout-s`` ran out, as timeout(1)
MAX_PERIOD_S = 3600.0  # longest poll period of ``wait`` and ``logs --follow``, seconds

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server", help=f"Service URL (else ${ENV_SERVER}, the config file, {DEFAULT_SERVER})."
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        help=f"User bearer token (else ${ENV_TOKEN}, the config file; none: MUNGE).",
    ),
]
JobIdArgument = Annotated[str, typer.Argument(help="Job id, e.g. j-3.")]


def config_path() -> Path:
    """The client's config file: ``$INTERSTICE_CONFIG``, else
    ``~/.config/interstice/client.toml`` (which need not exist)."""
    named = os.environ.get(ENV_CONFIG)
    return Path(named) if named else Path.home() / ".config" / "interstice" / "client.toml"


def read_config(path: Path) -> dict[str, str]:
    """The ``server`` and ``token`` of a client config file; ``{}`` when it does not exist.

    Raises:
        typer.Exit: (code 2, one line) the file is not TOML, has another key or a non-string
            value, or holds a token while others than its owner may read it.
    """
    if not path.is_file():
        if os.environ.get(ENV_CONFIG):
            fail(f"config file {path} (${ENV_CONFIG}) does not exist")
        return {}
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        fail(f"config file {path}: {exc}")
    for key, value in document.items():
        if key not in CONFIG_KEYS:
            fail(f"config file {path}: unknown key {key!r} (keys: {', '.join(CONFIG_KEYS)})")
        if not isinstance(value, str):
            fail(f"config file {path}: key {key!r} must be a string")
    mode = path.stat().st_mode
    if "token" in document and mode & (stat.S_IRWXG | stat.S_IRWXO):
        fail(
            f"config file {path} holds a token but is mode {stat.filemode(mode)}: "
            f"others may read it; chmod 600 {path}"
        )
    return document


def resolve(server: str | None, token: str | None) -> tuple[str, str | None]:
    """The server URL and token: flag, else environment, else config file; the token is
    None when there is none but the ``munge`` command is installed (MUNGE credentials).

    Raises:
        typer.Exit: (code 2) no token anywhere and no munge, or a bad config file.
    """
    config = read_config(config_path()) if not (server and token) else {}
    server = server or os.environ.get(ENV_SERVER) or config.get("server") or DEFAULT_SERVER
    token = token or os.environ.get(ENV_TOKEN) or config.get("token")
    if not token and not munge.available():
        fail(
            f"no token and no MUNGE on this host: give --token, set ${ENV_TOKEN}, put token "
            f"in {config_path()}, or run on a host with munged (the munge command)"
        )
    return server.rstrip("/"), token or None


def detail_of(response: httpx.Response) -> str:
    """One line from an error answer: the service's ``detail``, a 422's first field error
    as ``field: message``, else the status line."""
    try:
        detail = response.json()["detail"]
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code} {response.reason_phrase}"
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        first = detail[0]
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query"))
        more = f" (and {len(detail) - 1} more)" if len(detail) > 1 else ""
        return f"{where}: {first.get('msg', '')}{more}" if where else f"{first.get('msg')}{more}"
    return str(detail)


class Client:
    """The jobs API as one user.

    Args:
        server: base URL, e.g. ``http://127.0.0.1:8000``.
        token: the user's bearer token; None: a MUNGE credential per request.
    """

    def __init__(self, server: str, token: str | None) -> None:
        self.server = server
        auth: httpx.Auth | None = None
        headers = {}
        if token is None:
            auth = munge.MungeAuth(munge.socket_from_env())
        else:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=server, headers=headers, auth=auth, timeout=30.0)

    def call(self, method: str, path: str, missing_ok: bool = False, **kwargs: Any) -> Any:
        """One request; the decoded JSON answer (None for a 404 when ``missing_ok``).

        Raises:
            typer.Exit: code 2 on a 4xx answer (its detail on one line), code 1 when the
                service is unreachable or answers 5xx.
        """
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            unreachable(f"cannot reach the service at {self.server}: {exc}")
        except munge.MungeUnavailable as exc:
            fail(f"no token, and MUNGE cannot make a credential here: {exc}")
        if response.status_code == 404 and missing_ok:
            return None
        if 400 <= response.status_code < 500:
            fail(f"{method} {path}: {response.status_code} {detail_of(response)}")
        if response.status_code >= 500:
            unreachable(f"{method} {path}: {response.status_code} {detail_of(response)}")
        return response.json() if response.content else None

    def job(self, job_id: str) -> dict[str, Any]:
        """``GET /v1/jobs/{job_id}``."""
        return self.call("GET", f"/v1/jobs/{job_id}")


def unreachable(message: str) -> NoReturn:
    """Print ``error: <message>`` as one line on stderr and exit with code 1."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    raise typer.Exit(code=EXIT_ERROR)


def client(server: str | None, token: str | None) -> Client:
    """A :class:`Client` from the flags, environment or config file."""
    return Client(*resolve(server, token))


# --- job files -------------------------------------------------------------------------


def parse_nodes(text: str) -> tuple[int, int]:
    """``MIN:MAX`` or ``N`` (min = max = N) as two ints.

    Raises:
        typer.Exit: (code 2) anything else.
    """
    low, _, high = text.partition(":")
    try:
        return int(low), int(high or low)
    except ValueError:
        fail(f"--nodes must be MIN:MAX or N (integers), got {text!r}")


def parse_env(pairs: list[str]) -> dict[str, str]:
    """``K=V`` strings as a mapping.

    Raises:
        typer.Exit: (code 2) a string without ``=``.
    """
    env = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            fail(f"--env must be KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def number(text: str) -> int | float | str:
    """A flag's text as an int, else a float, else as is: the job's model then judges it, so a
    bad value is one line naming its key (``total_samples: ...``), not a usage panel."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def bounded(
    option: str, text: str | None, least: float, most: float = math.inf, *, integer: bool = False
) -> Any:
    """The number ``text`` gives ``option`` (None for None): finite, at least ``least`` and at
    most ``most``. Parsed here, not by typer, so that a bad value is one line naming the
    option, not a usage panel.

    Raises:
        typer.Exit: (code 2) not a number (an integer with ``integer``), not finite, or out
            of bounds.
    """
    if text is None:
        return None
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        fail(f"{option} must be {'an integer' if integer else 'a number'}, got {text!r}")
    if not math.isfinite(value) or value < least:
        fail(f"{option} must be at least {least:g}, got {text!r}")
    if value > most:
        fail(f"{option} must be at least {least:g} and at most {most:g}, got {text!r}")
    return value


def read_job_file(path: Path) -> dict[str, Any]:
    """A job file's keys; a relative ``workdir`` is made absolute against the file's folder.

    Raises:
        typer.Exit: (code 2) the file is missing or not TOML.
    """
    try:
        document = tomllib.loads(path.read_text())
    except OSError as exc:
        fail(f"job file {path}: {exc.strerror}")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        fail(f"job file {path}: {exc}")
    if isinstance(document.get("workdir"), str):
        document["workdir"] = str((path.parent / document["workdir"]).resolve())
    return document


def validate_job(document: dict[str, Any], source: str) -> None:
    """Check a job against the service's own request model before sending it.

    Raises:
        typer.Exit: (code 2) one line naming the first bad or unknown key.
    """
    from interstice.api.schemas.jobs import JobCreate

    try:
        JobCreate.model_validate(document)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(map(str, error["loc"]))
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        fail(f"{source}: {key + ': ' if key else ''}{message}")


# --- formatting ------------------------------------------------------------------------


def age(at: str | None, now: datetime | None = None) -> str:
    """How long ago an ISO time was, squeue style: ``42s``, ``7m``, ``3h``, ``2d``."""
    if not at:
        return "-"
    then = datetime.fromisoformat(at)
    then = then if then.tzinfo else then.replace(tzinfo=UTC)
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def samples(job: dict[str, Any]) -> str:
    """``done/total (percent)`` of a job's samples."""
    done, total = job.get("samples_done") or 0, job.get("total_samples") or 0
    share = f" ({100 * done / total:.0f}%)" if total else ""
    return f"{int(done)}/{int(total)}{share}"


def loss(job: dict[str, Any]) -> str:
    """The job's last reported loss, ``-`` before any."""
    value = job.get("last_loss")
    return "-" if value is None else f"{value:.4g}"


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    """The ``list`` table: one row per job."""
    table = Table(box=None, pad_edge=False)
    for column in ("JOBID", "STATE", "NODES", "MIN:MAX", "WORLD", "SAMPLES", "LOSS", "AGE"):
        table.add_column(column, no_wrap=True)
    for job in jobs:
        table.add_row(
            job["job_id"],
            job["state"],
            str(len(job.get("nodes") or [])),
            f"{job['min_nodes']}:{job['max_nodes']}",
            "-" if job.get("world_size") is None else str(job["world_size"]),
            samples(job),
            loss(job),
            age(job.get("submitted_at")),
        )
    return table


def job_table(job: dict[str, Any]) -> Table:
    """The ``show`` table: one row per field; lists and mappings as compact JSON."""
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in job.items():
        if key == "rescales":
            value = "; ".join(
                f"{r['at']} {len(r['from_nodes'])}->{len(r['to_nodes'])} nodes ({r['reason']})"
                for r in value
            )
        elif isinstance(value, list | dict):
            value = json.dumps(value)
        table.add_row(key, "-" if value is None or value == "" else str(value))
    return table


def wide_console() -> Console:
    """Standard output, never wrapped below 160 columns (a table stays one line per job)."""
    return Console(width=max(160, Console().width), soft_wrap=False, highlight=False)


def why_ended(job: dict[str, Any]) -> str:
    """One line on how an ended job ended."""
    reason = job.get("error")
    if not reason and job.get("errors"):
        reason = job["errors"][-1].get("error")
    text = f"job {job['job_id']} {job['state']}"
    return f"{text}: {' '.join(str(reason).split())}" if reason else text


def poll(condition: Callable[[], bool], period_s: float, timeout_s: float | None) -> bool:
    """Call ``condition`` every ``period_s`` until it is true (True) or ``timeout_s`` passes
    (False; None waits for ever)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not condition():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(period_s)
    return True


# --- commands --------------------------------------------------------------------------


@job_app.command("submit")
def submit(
    job_file: Annotated[
        Path | None, typer.Argument(help="TOML file of JobCreate keys (flags override it).")
    ] = None,
    command: Annotated[
        str | None,
        typer.Option(help="The script and its arguments, split like a shell: 'train.py --x 1'."),
    ] = None,
    nodes: Annotated[str | None, typer.Option(help="MIN:MAX nodes, or N for both.")] = None,
    total_samples: Annotated[
        str | None, typer.Option(metavar="INT", help="Samples to train.")
    ] = None,
    global_batch_size: Annotated[
        str | None, typer.Option(metavar="INT", help="Samples per optimizer step, whole job.")
    ] = None,
    workdir: Annotated[
        Path | None, typer.Option(help="Folder the script runs in (default: this one).")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE for the job's processes (repeat).")
    ] = None,
    nproc_per_node: Annotated[
        str | None, typer.Option(help="Processes per node, or 'auto' (one per GPU, 1 on CPU).")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model of the scalability table (optional).")
    ] = None,
    priority: Annotated[
        str | None, typer.Option(metavar="FLOAT", help="Weight in the objective, > 0.")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Submit a job from JOB_FILE and/or flags; prints its id (like sbatch).

    A relative workdir in JOB_FILE is relative to that file's folder; without one the job runs in the folder you submit from, as sbatch does.
    """  # noqa: E501 (one paragraph of --help)
    document = read_job_file(job_file) if job_file is not None else {}
    source = str(job_file) if job_file is not None else "job"
    if command is not None:
        try:
            document["command"] = shlex.split(command)
        except ValueError as exc:
            fail(f"--command: {exc}")
    if nodes is not None:
        document["min_nodes"], document["max_nodes"] = parse_nodes(nodes)
    if env:
        given = document.get("env", {})  # a bad one is left for validate_job to name
        document["env"] = {**given, **parse_env(env)} if isinstance(given, dict) else given
    if workdir is not None:
        document["workdir"] = str(workdir.resolve())
    document.setdefault("workdir", str(Path.cwd()))
    numbers = {
        "total_samples": total_samples,
        "global_batch_size": global_batch_size,
        "priority": priority,
        "nproc_per_node": nproc_per_node,
    }
    document.update({key: number(text) for key, text in numbers.items() if text is not None})
    if model is not None:
        document["model"] = model
    validate_job(document, source)
    job = client(server, token).call("POST", "/v1/jobs", json=document)
    typer.echo(f"Submitted job {job['job_id']}")


@job_app.command("list")
def list_jobs(
    state: Annotated[
        str | None, typer.Option(help="Only jobs in this state (queued, running, ...).")
    ] = None,
    limit: Annotated[
        str, typer.Option(metavar="INT", help="At most this many, newest first.")
    ] = "100",
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Your jobs, newest first (like squeue): id, state, nodes, world size, samples, loss."""
    params: dict[str, Any] = {"limit": bounded("--limit", limit, 1, integer=True)}
    if state is not None:
        params["state"] = state
    answer = client(server, token).call("GET", "/v1/jobs", params=params)
    wide_console().print(jobs_table(answer["data"]))


@job_app.command("show")
def show(
    job_id: JobIdArgument,
    as_json: Annotated[bool, typer.Option("--json", help="The API's JSON as is.")] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Every field of one job (like scontrol show job)."""
    job = client(server, token).job(job_id)
    if as_json:
        typer.echo(json.dumps(job, indent=2))
    else:
        Console(highlight=False).print(job_table(job))


@job_app.command("logs")
def logs(
    job_id: JobIdArgument,
    rank_text: Annotated[
        str, typer.Option("--rank", metavar="INT", help="Global rank whose output to show.")
    ] = "0",
    tail_text: Annotated[
        str, typer.Option("--tail", metavar="INT", help="Last this many lines.")
    ] = "200",
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")
    ] = False,
    period_text: Annotated[
        str, typer.Option("--period-s", metavar="FLOAT", help="Poll period of --follow, seconds.")
    ] = "1.0",
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """The output (stdout and stderr) of one rank, across the job's generations.

    With --follow it waits for the log to appear and prints what is appended until the job has ended.
    """  # noqa: E501 (one paragraph of --help)
    rank = bounded("--rank", rank_text, 0, integer=True)
    tail = bounded("--tail", tail_text, 0, integer=True)
    period_s = bounded("--period-s", period_text, 0, MAX_PERIOD_S)
    api = client(server, token)
    if not follow:
        answer = api.call("GET", f"/v1/jobs/{job_id}/logs", params={"rank": rank, "tail": tail})
        sys.stdout.write(answer["text"])
        return
    offset: int | None = None  # the first read is the tail, the next ones from its end

    def print_new_and_ended() -> bool:
        nonlocal offset
        ended = api.job(job_id)["state"] in ENDED_STATES  # read before the last bytes
        while True:  # an answer holds at most the service's chunk: read until none is left
            where = {"tail": tail} if offset is None else {"offset": offset}
            answer = api.call(
                "GET", f"/v1/jobs/{job_id}/logs", missing_ok=True, params={"rank": rank, **where}
            )
            if answer is None:  # no log of that rank yet
                return ended
            sys.stdout.write(answer["text"])
            sys.stdout.flush()
            offset = answer["next_offset"]
            if not answer["text"]:
                return ended

    poll(print_new_and_ended, period_s, None)


@job_app.command("cancel")
def cancel(job_id: JobIdArgument, server: ServerOption = None, token: TokenOption = None) -> None:
    """Cancel a queued or running job (like scancel); its nodes get stop."""
    job = client(server, token).call("DELETE", f"/v1/jobs/{job_id}")
    typer.echo(f"job {job['job_id']} {job['state']}")


@job_app.command("wait")
def wait(
    job_id: JobIdArgument,
    timeout_text: Annotated[
        str | None,
        typer.Option(
            "--timeout-s", metavar="FLOAT", help="Give up after this many seconds (exit 124)."
        ),
    ] = None,
    period_text: Annotated[
        str, typer.Option("--period-s", metavar="FLOAT", help="Poll period, seconds.")
    ] = "2.0",
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Wait until the job ends.

    Exit code 0 finished, 1 failed or cancelled (the reason printed), 2 bad input, 124 timed out.
    """
    timeout_s = bounded("--timeout-s", timeout_text, 0)
    period_s = bounded("--period-s", period_text, 0, MAX_PERIOD_S)
    api = client(server, token)
    last: dict[str, Any] = {}

    def ended() -> bool:
        last.update(api.job(job_id))
        return last["state"] in ENDED_STATES

    if not poll(ended, period_s, timeout_s):
        typer.echo(f"error: job {job_id} still {last['state']} after {timeout_s} s", err=True)
        raise typer.Exit(code=EXIT_TIMEOUT)
    if last["state"] != "finished":
        typer.echo(why_ended(last), err=True)
        raise typer.Exit(code=EXIT_ERROR)
    typer.echo(why_ended(last))
