"""uvicorn's access log without the quiet agents' requests.

At 10,000 agents with a 10 s heartbeat the service answers about 1,000 agent polls,
long-polls and heartbeats a second: logged one line each at the default level
``info``, that is 86 million lines a day, which bury every request an admin would look
for (the benchmarks run the service at ``warning``, so they never paid for it). Here such a
request is left out of the access log when it was answered below 400; an error answer
(401, 404, 422, ...) and every other route's request are logged as uvicorn logs them, and
at ``--log-level debug`` (or ``trace``) every request is.
"""

from __future__ import annotations

import logging

from interstice.api.agent_fast_path import AGENT_PATH

ACCESS_LOGGER = "uvicorn.access"


class QuietAgentRequests(logging.Filter):
    """Drops an access-log record of an agent's poll, long-poll or heartbeat answered below
    400, unless the access logger logs debug records.

    uvicorn's record has ``args == (client, method, path with query, http version, status)``;
    a record of another shape passes unchanged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not (isinstance(args, tuple) and len(args) == 5 and isinstance(args[4], int)):
            return True
        if args[4] >= 400 or not AGENT_PATH.fullmatch(str(args[2]).partition("?")[0]):
            return True
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def quiet_agent_requests() -> None:
    """Install :class:`QuietAgentRequests` on uvicorn's access logger (once; call it after
    ``uvicorn.Config`` has configured logging)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, QuietAgentRequests) for f in logger.filters):
        logger.addFilter(QuietAgentRequests())
