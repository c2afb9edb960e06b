"""The node-side configuration the Slurm Prolog and Epilog read: ``/etc/interstice/agent.conf``.

The file holds the agent token, so it must be readable only by root and the Slurm user
(``chown root:slurm``, ``chmod 0640``); :func:`load_agent_conf` refuses a file that others can
read or write. Format: one ``key=value`` per line (dotenv syntax; ``#`` comments on lines
of their own, since prolog.sh reads ``partition``, ``state_dir`` and ``interstice_bin`` with
sed), keys as in :class:`AgentConf`::

    server_url=https://interstice-a.example.org:8000,https://interstice-b.example.org:8000
    agent_token=...
    partition=scavenger
    grace_s=30

``INTERSTICE_AGENT_CONF`` overrides the path (tests, non-standard installs).
"""

import pwd
import signal
import stat
from collections.abc import Mapping
from pathlib import Path

from dotenv import dotenv_values
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

DEFAULT_CONF_PATH = Path("/etc/interstice/agent.conf")
CONF_PATH_ENV = "INTERSTICE_AGENT_CONF"
AUTO_PORTS = "auto"
"""``ports=auto``: the Prolog picks two free ports for the agent."""


class AgentConfError(ValueError):
    """The agent configuration file is missing, unsafe, or holds a bad value."""


class AgentConf(BaseModel):
    """Settings of the agent that a Slurm Prolog starts on a node.

    Attributes:
        server_url: the interstice service's base URL (``--server`` of ``interstice agent``),
            or the URLs of all its replicas separated by commas: the agent fails over
            between them.
        agent_token: a token of role ``agent`` (``interstice token create --role agent``).
        partition: the scavenger partition; the Prolog starts an agent only for its jobs.
        grace_s: the agent's ``--grace-s`` and the seconds the Epilog waits for the agent to
            release its node after the signal before it kills the agent and its workers; set
            it to the partition's GraceTime.
        interstice_bin: the ``interstice`` executable the Prolog runs (read by prolog.sh).
        workdir: the agent's working directory (``--workdir``), created if absent.
        state_dir: where the Prolog keeps one pid file and one log per job, created 0700.
        agent_user: run the agent as this user instead of root; empty for root. Leave it
            empty where jobs name their owners (multi-user mode): only an agent running as
            root runs each job as its owner (:mod:`interstice.agents.owner`).
        preemption_signal: the signal the Epilog sends first. SIGTERM, as Slurm itself sends
            at preemption; not SIGUSR1, which NCCL may use internally.
        ports: the agent's rendezvous ports (``--ports``), comma-separated; empty for the
            agent's default (29500,29501); ``auto`` for two ports free when the Prolog runs,
            where several slurmd share a host (multiple-slurmd test clusters), so that their
            agents do not all host their rendezvous on one port.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    server_url: str = Field(min_length=1)
    agent_token: str = Field(min_length=1)
    partition: str = "scavenger"
    grace_s: float = Field(default=30.0, ge=1, le=3600)
    interstice_bin: str = "interstice"
    workdir: Path = Path("/var/lib/interstice/work")
    state_dir: Path = Path("/run/interstice")
    agent_user: str = ""
    preemption_signal: str = "SIGTERM"
    ports: str = ""

    @field_validator("server_url")
    @classmethod
    def _http_urls(cls, value: str) -> str:
        urls = [url.strip().rstrip("/") for url in value.split(",") if url.strip()]
        bad = [url for url in urls if not url.startswith(("http://", "https://"))]
        if not urls or bad:
            raise ValueError(
                f"{bad[0] if bad else value!r}: each URL must start with http:// or https://"
            )
        return ",".join(urls)

    @field_validator("ports")
    @classmethod
    def _port_list(cls, value: str) -> str:
        value = value.strip()
        if value in ("", AUTO_PORTS):
            return value
        try:
            ports = [int(part) for part in value.split(",")]
        except ValueError:
            ports = []
        if not ports or not all(0 < port < 65536 for port in ports):
            raise ValueError(f"{value!r}: give ports in 1..65535 separated by commas, or auto")
        return ",".join(map(str, ports))

    @field_validator("preemption_signal")
    @classmethod
    def _known_signal(cls, value: str) -> str:
        if value not in signal.Signals.__members__:
            raise ValueError(f"{value!r} is not a signal name such as SIGTERM")
        return value

    @field_validator("agent_user")
    @classmethod
    def _known_user(cls, value: str) -> str:
        if value:
            try:
                pwd.getpwnam(value)
            except KeyError:
                raise ValueError(f"no such user {value!r}") from None
        return value

    @property
    def signal_number(self) -> signal.Signals:
        """The preemption signal as a :class:`signal.Signals` member."""
        return signal.Signals[self.preemption_signal]


def conf_path(environ: Mapping[str, str]) -> Path:
    """The configuration file's path: ``$INTERSTICE_AGENT_CONF`` or the default.

    Args:
        environ: the process environment.

    Returns:
        The path (not checked to exist).
    """
    return Path(environ.get(CONF_PATH_ENV) or DEFAULT_CONF_PATH)


def load_agent_conf(path: Path) -> AgentConf:
    """Read and validate the agent configuration file.

    Args:
        path: the file, e.g. ``/etc/interstice/agent.conf``.

    Returns:
        The validated :class:`AgentConf`.

    Raises:
        AgentConfError: the file is absent, is readable or writable by others (it holds the
            token), or a key is unknown, missing or has a bad value; the message names the
            file and the key.
    """
    try:
        mode = path.stat().st_mode
    except OSError as error:
        raise AgentConfError(f"cannot read {path}: {error.strerror}") from error
    if mode & (stat.S_IROTH | stat.S_IWOTH):
        raise AgentConfError(
            f"{path} is readable or writable by others (mode {stat.S_IMODE(mode):04o}); "
            "it holds the agent token: chmod 0640 and chown root:<SlurmUser>"
        )
    values = {key: value for key, value in dotenv_values(path).items() if value is not None}
    try:
        return AgentConf(**values)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or 'file'}: {item['msg']}"
            for item in error.errors()
        )
        raise AgentConfError(f"{path}: {problems}") from error
