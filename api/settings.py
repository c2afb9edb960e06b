"""The service's one configuration object (env prefix ``INTERSTICE_``, optional TOML file).

Precedence, highest first: command-line flags, environment variables
(``INTERSTICE_DB_URL``, ``INTERSTICE_PORT``, ...), the ``--config`` TOML file (keys are the
field names below, e.g. ``db_url = "postgresql+psycopg://..."``), the defaults.
"""

import re
from pathlib import Path
from typing import Any

from interstice.optimizer.admission import ADMISSION_EFFICIENCY
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from interstice import data

NODE_GROUP_PATTERN = r"^(.*\d)[^\d]+\d+$"
"""The default ``node_group_pattern``: the name up to its last letters and number
(``a01n03`` → ``a01``, ``r2c07n12`` → ``r2c07``)."""


class Settings(BaseSettings):
    """Configuration of ``interstice serve``.

    Attributes:
        db_url: SQLAlchemy URL; ``sqlite:///./interstice.db`` (WAL mode) or
            ``postgresql+psycopg://user:pass@host/db``.
        host: address to listen on.
        port: TCP port to listen on.
        debounce_s: events closer than this are coalesced into one solve, seconds.
        heartbeat_interval_s: agents heartbeat this often, seconds; an agent silent for
            ``missed_heartbeats_lost`` intervals is lost.
        missed_heartbeats_lost: missed intervals after which an agent is lost.
        checkpoint_root: folder under which each job checkpoints (``<root>/<job_id>``).
        scalability_csv: table loaded at start when the database holds none; default the
            shared data's ``imagenet-scalability.csv`` when present.
        max_poll_wait_s: cap on a long-poll's ``wait``, seconds.
        max_command_failures: failed command acks and stalled generations (no first step, no
            progress) after which a job is ``failed`` (a failure the agent marks
            ``job_failed`` fails it at once).
        generation_start_timeout_s: a running job whose current generation has reported no
            step this long after its commands were written is released from its nodes and
            started anew (rescale reason ``stalled``, a failure counted toward
            ``max_command_failures``; :mod:`interstice.api.control.stalls`), seconds; 0: never.
        progress_timeout_s: a running job whose current generation has stepped, and whose
            step has not advanced this long (nor its generation started), is released the
            same way, seconds; 0: never; None: each job's own bound,
            ``max(progress_timeout_floor_s, 20 × its median report interval)``
            (:func:`interstice.api.control.stalls.progress_bound_s`).
        progress_timeout_floor_s: the least derived progress bound, seconds.
        max_active_jobs: most jobs the optimizer considers at once (running ones included);
            None: no cap, capacity-based admission alone
            (:func:`interstice.optimizer.admission.admit`).
        admission_efficiency: admission counts each job at the most nodes it runs on at
            this parallel efficiency, in [0, 1]; 0 counts its ``max_nodes``
            (:func:`interstice.optimizer.admission.usable_nodes`).
        db_wait_s: how long start-up waits for the database, seconds.
        gc_freeze_interval_s: the objects alive are moved out of the garbage collector's
            way this often (``gc.freeze()``, :mod:`interstice.api.collector`), seconds; 0
            keeps CPython's own regime.
        bootstrap_admin_token: when set, this bearer token is stored as an ``admin`` token at
            start (for deployments that cannot run ``interstice token create`` first).
        log_level: uvicorn log level.
        agent_fast_path: a quiet agent's poll, long-poll and heartbeat are answered without
            FastAPI's routing and dependency solving (:mod:`interstice.api.agent_fast_path`,
            same answers); false sends them through FastAPI as every other request.
        auth_munge: user routes also accept ``Authorization: MUNGE <credential>``, decoded by
            this host's munged (:mod:`interstice.api.auth.munge`); start-up fails when munged
            does not answer. Off: tokens only.
        munge_socket: munged's socket; None: munged's default
            (``/run/munge/munge.socket.2``).
        munge_min_uid: lowest uid that may own jobs (a MUNGE caller's, a bound token's); uid
            0 never may. Accounts below it are the system's (the service's, slurm's).
        multi_user: every job has a Unix owner and runs as it: a user token must be bound to
            a Unix account, a job's directory is ``<checkpoint_root>/<owner>/<job_id>`` and is
            created by the owner's processes on the nodes, never by the service, and the
            service reads a job's logs only through files its owner owns. Off (single-user
            mode): jobs run as the agent's account and the service creates
            ``<checkpoint_root>/<job_id>``.
        node_group_pattern: a regular expression whose first group, searched in a node's
            name, is the node's cabinet (or rack) on the dashboard's node map; a name it
            does not match goes to the group of its name without its trailing number.
            Default: the name up to its last letters and number (Summit's ``a01n03``:
            cabinet ``a01``).
        solver_process: the leader builds and solves each problem in a child process of
            its own, at a lower CPU priority (:mod:`interstice.api.control.solver_process`):
            reclaims, heartbeats and long-polls never wait for the solve's share of the
            interpreter. Off: in a thread of the service's process (tests that inject a
            solver which does not pickle).
        solver_hang_s: how long the solver process may take to build a problem, and then
            to answer beyond the objective's ``time_limit_s``, before it is taken as hung:
            it is killed, a new one started and the solve asked once more, seconds.
    """

    model_config = SettingsConfigDict(env_prefix="INTERSTICE_", extra="forbid")

    db_url: str = "sqlite:///./interstice.db"
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    debounce_s: float = Field(default=0.5, ge=0)
    heartbeat_interval_s: float = Field(default=10.0, gt=0)
    missed_heartbeats_lost: int = Field(default=3, ge=1)
    checkpoint_root: Path = Path("checkpoints")
    scalability_csv: Path | None = None
    max_poll_wait_s: float = Field(default=60.0, ge=0)
    max_command_failures: int = Field(default=3, ge=1)
    generation_start_timeout_s: float = Field(default=900.0, ge=0)
    progress_timeout_s: float | None = Field(default=None, ge=0)
    progress_timeout_floor_s: float = Field(default=900.0, gt=0)
    max_active_jobs: int | None = Field(default=None, ge=1)
    admission_efficiency: float = Field(default=ADMISSION_EFFICIENCY, ge=0, le=1)
    db_wait_s: float = Field(default=30.0, ge=0)
    gc_freeze_interval_s: float = Field(default=1.0, ge=0)
    bootstrap_admin_token: SecretStr | None = None
    log_level: str = "info"
    agent_fast_path: bool = True
    auth_munge: bool = False
    munge_socket: Path | None = None
    munge_min_uid: int = Field(default=1000, ge=1, le=2**32 - 2)
    multi_user: bool = False
    node_group_pattern: str = NODE_GROUP_PATTERN
    solver_process: bool = True
    solver_hang_s: float = Field(default=120.0, gt=0)

    @field_validator("node_group_pattern")
    @classmethod
    def _one_group(cls, pattern: str) -> str:
        # checked in Python's syntax; the dashboard runs it as a JavaScript RegExp and says
        # on the page when that refuses it
        try:
            groups = re.compile(pattern).groups
        except re.error as exc:
            raise ValueError(f"node_group_pattern is not a regular expression: {exc}") from None
        if groups < 1:
            raise ValueError("node_group_pattern needs a group (...): the cabinet's part")
        return pattern

    @field_validator("db_url")
    @classmethod
    def _known_dialect(cls, url: str) -> str:
        if not url.startswith(("sqlite", "postgresql")):
            raise ValueError("db_url must be a sqlite:/// or postgresql+psycopg:// URL")
        return url

    def scalability_source(self) -> Path | None:
        """The CSV to load at start: ``scalability_csv``, else the shared table if present."""
        if self.scalability_csv is not None:
            return self.scalability_csv
        shared = data.data_dir() / data.SCALABILITY_FILE
        return shared if shared.is_file() else None


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Settings from flags (``overrides``), environment, TOML ``config_file``, defaults.

    Raises:
        pydantic.ValidationError: a setting has a bad value (the error names it).
        FileNotFoundError: ``config_file`` does not exist.
    """
    if config_file is None:
        return Settings(**overrides)
    if not config_file.is_file():
        raise FileNotFoundError(f"config file {config_file} does not exist")

    class _WithFile(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (
                init_settings,
                env_settings,
                TomlConfigSettingsSource(settings_cls, toml_file=config_file),
            )

    return Settings.model_validate(_WithFile(**overrides).model_dump())
