"""What the notifier knows of an agent's pending commands: a poll skips the database read
only when the agent's last read found none, or every command it found is acknowledged, and
no command was written since."""

from __future__ import annotations

import asyncio

from interstice.api.control.notify import Notifier


def _bound() -> Notifier:
    notifier = Notifier()
    notifier.bind(asyncio.get_running_loop())
    return notifier


async def _settle() -> None:
    """Let the wake-ups queued with ``call_soon_threadsafe`` run."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_an_empty_read_marks_the_agent_clear_until_a_command_wakes_it() -> None:
    async def scenario() -> list[bool]:
        notifier, seen = _bound(), []
        mark = notifier.wakes_so_far(7)
        notifier.found(7, mark, command_ids=[])
        seen.append(notifier.known_clear(7))  # True: read, none, nothing since
        notifier.wake([7])
        await _settle()
        seen.append(notifier.known_clear(7))  # False: a command was written
        notifier.found(7, notifier.wakes_so_far(7), command_ids=[3, 4])
        seen.append(notifier.known_clear(7))  # False: the read found two
        return seen

    assert asyncio.run(scenario()) == [True, False, False]


def test_a_command_written_during_the_read_keeps_the_agent_unclear() -> None:
    async def scenario() -> bool:
        notifier = _bound()
        mark = notifier.wakes_so_far(7)  # the read begins...
        notifier.wake([7])  # ...a command is committed meanwhile...
        await _settle()
        notifier.found(7, mark, command_ids=[])  # ...and the read's snapshot predates it
        return notifier.known_clear(7)

    assert asyncio.run(scenario()) is False


def test_with_a_relay_that_may_lose_wake_ups_every_poll_reads() -> None:
    async def scenario() -> bool:
        notifier = _bound()
        notifier.wakes_complete = False  # what PostgresRelay sets
        notifier.found(7, notifier.wakes_so_far(7), command_ids=[])
        return notifier.known_clear(7)

    assert asyncio.run(scenario()) is False


def test_an_agent_whose_commands_are_all_acked_is_clear_until_woken() -> None:
    async def scenario() -> list[bool]:
        notifier, seen = _bound(), []
        notifier.found(7, notifier.wakes_so_far(7), command_ids=[3, 4])
        notifier.acked(7, 3)
        seen.append(notifier.known_clear(7))  # False: command 4 is not acknowledged yet
        notifier.acked(8, 4)  # another agent's ack of the same id changes nothing here
        notifier.acked(7, 4)
        seen.append(notifier.known_clear(7))  # True: both acknowledged, nothing since
        notifier.wake([7])
        await _settle()
        seen.append(notifier.known_clear(7))  # False: a command was written
        notifier.acked(7, 4)  # a repeated ack does not make it clear again
        seen.append(notifier.known_clear(7))
        return seen

    assert asyncio.run(scenario()) == [False, True, False, False]


def test_a_command_written_after_the_read_keeps_the_acked_agent_unclear() -> None:
    async def scenario() -> bool:
        notifier = _bound()
        notifier.found(7, notifier.wakes_so_far(7), command_ids=[3])
        notifier.wake([7])  # command 5 is written while the agent runs command 3...
        await _settle()
        notifier.acked(7, 3)  # ...so acknowledging 3 does not make it clear
        return notifier.known_clear(7)

    assert asyncio.run(scenario()) is False


def test_acks_with_a_relay_that_may_lose_wake_ups_leave_polls_reading() -> None:
    async def scenario() -> bool:
        notifier = _bound()
        notifier.wakes_complete = False
        notifier.found(7, notifier.wakes_so_far(7), command_ids=[3])
        notifier.acked(7, 3)
        return notifier.known_clear(7)

    assert asyncio.run(scenario()) is False
