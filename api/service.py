"""The running service's shared parts: database, settings, metrics, long-poll wake-ups,
token cache and agent leases, and what follows every write transaction.

The resources' logic lives in one module each of :mod:`interstice.api.services`
(:mod:`~interstice.api.services.nodes`, :mod:`~interstice.api.services.jobs`,
:mod:`~interstice.api.services.agents`, :mod:`~interstice.api.services.objective`,
:mod:`~interstice.api.services.scalability`, :mod:`~interstice.api.services.reports`), the
leases' in :mod:`~interstice.api.control.leases`; their functions take the :class:`Service`,
run one transaction, then hand its :class:`~interstice.api.services.state.Changes` to
:meth:`Service.after_commit`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anyio
from interstice.api.auth.munge import MungeGate
from interstice.api.auth.tokens import TokenCache, hash_token
from interstice.api.control import leases
from interstice.api.control.acks import AckBatcher
from interstice.api.control.notify import Notifier
from interstice.api.metrics import Metrics
from interstice.api.services import history
from interstice.api.services.state import Changes
from interstice.api.settings import Settings
from interstice.api.store.db import Database
from interstice.api.store.tables import Config, Token, utcnow
from interstice.optimizer import ScalabilityTable
from sqlalchemy import select


class Service:
    """State, wake-ups and staleness of one running service."""

    def __init__(self, db: Database, settings: Settings, metrics: Metrics) -> None:
        self.db = db
        self.settings = settings
        self.metrics = metrics
        self.notifier = Notifier()
        self.on_stale: Callable[[], None] = lambda: None
        self.tokens = TokenCache(db)
        self.munge = (
            MungeGate(db, settings.munge_socket, settings.munge_min_uid)
            if settings.auth_munge
            else None
        )
        """The MUNGE check of user requests; None: MUNGE credentials are refused."""
        self.leases = leases.Leases()
        self.acks = AckBatcher(self)
        """Command acknowledgements, written in batches (started with the event loop)."""
        self.poll_reads: anyio.CapacityLimiter | None = None
        """Threads of the long-polls' reads (set at start-up), apart from FastAPI's pool where
        writers queue on the write lock: a waiting writer never delays a poll's answer."""
        self.event_writes: anyio.CapacityLimiter | None = None
        """Threads of the scheduler's node events (set at start-up), apart from FastAPI's pool
        where other requests may fill every thread: a reclaim never waits for a thread."""
        self.leader_since: float | None = time.monotonic()
        """``time.monotonic()`` when this process became leader (see
        :mod:`interstice.api.control.leader`), None while it follows: only the leader's
        :meth:`sweep` marks agents lost. One process (SQLite) leads from the start."""
        self.agent_counts = history.AgentCounts(utcnow())
        """Alive agents at each lease sweep (the database keeps no such history)."""

    def after_commit(self, changes: Changes) -> None:
        """Wake long-polls, count rescales, mark stale: what follows a commit."""
        self.notifier.wake(changes.wake)
        for reason, n in changes.rescales.items():
            self.metrics.rescales.labels(reason).inc(n)
        if changes.stale:
            self.on_stale()

    def bootstrap(self) -> None:
        """Load the scalability table from its CSV when none is stored; store a bootstrap token."""
        with self.db.write() as session:
            if session.get(Config, "scalability") is None:
                source = self.settings.scalability_source()
                if source is not None:
                    text = Path(source).read_text()
                    ScalabilityTable.from_csv(text)
                    session.add(
                        Config(key="scalability", value={"csv": text, "source": str(source)})
                    )
            secret = self.settings.bootstrap_admin_token
            if secret is not None:
                digest = hash_token(secret.get_secret_value())
                if session.scalar(select(Token).where(Token.token_sha256 == digest)) is None:
                    session.add(Token(name="bootstrap", role="admin", token_sha256=digest))
