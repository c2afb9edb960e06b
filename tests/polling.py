"""Waiting, bounded, for what other processes and threads do: one poll loop for every test."""

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    condition: Callable[[], Any],
    timeout_s: float = 10.0,
    what: str = "the condition",
    interval_s: float = 0.05,
    running: Callable[[], bool] | None = None,
) -> Any:
    """Call ``condition`` every ``interval_s`` seconds until it returns a truthy value.

    Args:
        condition: what to wait for; its truthy value is returned.
        timeout_s: longest wait, seconds.
        what: names the condition in the failure message.
        interval_s: seconds between two calls.
        running: whether what is watched still runs; once it returns False the wait fails at
            once instead of running into the timeout.

    Returns:
        The first truthy value of ``condition()``.

    Raises:
        AssertionError: not within ``timeout_s``, or ``running()`` turned False first.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert running is None or running(), f"ended before {what}"
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(interval_s)
