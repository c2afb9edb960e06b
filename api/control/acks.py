"""Command acknowledgements written in batches (group commit).

Every ack that arrives while a batch is being written joins the next batch: a burst of N acks
(a solve that starts thousands of nodes, the rescale of a 32-node job) takes a few write
transactions instead of N, and a reclaim waiting for the write lock waits behind one batch,
not behind N acks queued one transaction each. An ack that finds nothing to wait for is
written at once, alone. (Measured at 5,000 agents, ``bench/agents_load.py``: one
transaction per ack held the write lock for 53 s of a 110 s run.) Each committed ack is
told to the notifier (:meth:`~interstice.api.control.notify.Notifier.acked`): an agent whose
commands are all acknowledged polls next without a database read.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import anyio
from interstice.api.schemas.agents import CommandAckAnswer
from interstice.api.services.agents import Ack, ack_batch
from interstice.api.services.state import parse_id

if TYPE_CHECKING:
    from interstice.api.service import Service

log = logging.getLogger("interstice.api")

MAX_BATCH = 1000
"""Most acks written in one transaction."""


class AckBatcher:
    """Queues acks on the event loop; one task writes them in batches in a worker thread."""

    def __init__(self, service: Service) -> None:
        self._service = service
        self._queued: list[tuple[Ack, asyncio.Future[CommandAckAnswer]]] = []
        self._arrived = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the writer task on the running loop."""
        self._writer = asyncio.create_task(self._write_forever(), name="interstice-acks")

    async def stop(self) -> None:
        """Stop the writer; acks still queued are answered with an error (the agent retries)."""
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        for _, answer in self._queued:
            if not answer.done():
                answer.set_exception(RuntimeError("the service is shutting down"))
        self._queued.clear()

    async def ack(self, ack: Ack) -> CommandAckAnswer:
        """Acknowledge a command (:func:`interstice.api.services.agents.ack_batch`); returns
        once its batch is committed.

        Raises:
            NotFound: unknown agent, or no such command for this agent.
        """
        answer = asyncio.get_running_loop().create_future()
        self._queued.append((ack, answer))
        self._arrived.set()
        return await answer

    async def _write_forever(self) -> None:
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            while self._queued:
                batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
                await self._write([ack for ack, _ in batch], [answer for _, answer in batch])

    async def _write(
        self, acks: list[Ack], answers: list[asyncio.Future[CommandAckAnswer]]
    ) -> None:
        try:
            results = await anyio.to_thread.run_sync(self._write_batch, acks)
        except Exception as exc:  # noqa: BLE001 - handed to every request of the batch
            results = [exc] * len(acks)
        notifier = self._service.notifier
        for ack, answer, result in zip(acks, answers, results, strict=True):
            number = parse_id(ack.agent_id, "a")
            if isinstance(result, CommandAckAnswer) and number is not None:
                notifier.acked(number, result.command_id)  # its next poll may skip the read
            if answer.done():  # the request was cancelled: the ack is written all the same
                continue
            if isinstance(result, BaseException):
                answer.set_exception(result)
            else:
                answer.set_result(result)

    def _write_batch(self, acks: list[Ack]) -> list[CommandAckAnswer | Exception]:
        """The batch in one transaction; if it fails, each ack alone, so that one bad ack
        fails only its own request."""
        try:
            return ack_batch(self._service, acks)
        except Exception:
            if len(acks) == 1:
                raise
            log.exception("a batch of %d acks failed; writing them one by one", len(acks))
        results: list[CommandAckAnswer | Exception] = []
        for ack in acks:
            try:
                results += ack_batch(self._service, [ack])
            except Exception as exc:  # noqa: BLE001 - this ack's own failure
                results.append(exc)
        return results
