"""The access log's filter of quiet agent requests, on records shaped as uvicorn's."""

import logging

import pytest
from interstice.api.access_log import ACCESS_LOGGER, QuietAgentRequests, quiet_agent_requests


def record(path: str, status: int, method: str = "GET") -> logging.LogRecord:
    """An access-log record as uvicorn's protocol writes it."""
    return logging.LogRecord(
        ACCESS_LOGGER,
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:50000", method, path, "1.1", status),
        None,
    )


@pytest.fixture
def access_logger():
    logger = logging.getLogger(ACCESS_LOGGER)
    level, filters = logger.level, list(logger.filters)
    yield logger
    logger.setLevel(level)
    logger.filters = filters


@pytest.mark.parametrize(
    ("path", "status", "kept"),
    [
        ("/v1/agents/a-7/poll?wait=25", 200, False),
        ("/v1/agents/a-7/commands?wait=0", 200, False),
        ("/v1/agents/a-7/heartbeat", 200, False),
        ("/v1/agents/a-7/poll?wait=25", 401, True),  # errors stay
        ("/v1/agents/a-7/heartbeat", 422, True),
        ("/v1/agents/a-7/commands/3/ack", 200, True),  # not a quiet request
        ("/v1/agents", 201, True),
        ("/v1/jobs", 200, True),
        ("/v1/agents/x-7/poll", 200, True),
    ],
)
def test_only_quiet_agent_requests_answered_below_400_are_dropped_at_info(
    access_logger: logging.Logger, path: str, status: int, kept: bool
) -> None:
    access_logger.setLevel(logging.INFO)
    assert QuietAgentRequests().filter(record(path, status)) is kept


def test_at_debug_every_request_is_logged(access_logger: logging.Logger) -> None:
    access_logger.setLevel(logging.DEBUG)
    assert QuietAgentRequests().filter(record("/v1/agents/a-7/poll", 200)) is True


def test_a_record_of_another_shape_passes(access_logger: logging.Logger) -> None:
    access_logger.setLevel(logging.INFO)
    other = logging.LogRecord(ACCESS_LOGGER, logging.INFO, __file__, 1, "hello %s", ("x",), None)
    assert QuietAgentRequests().filter(other) is True


def test_installed_once_it_filters_the_access_logger(access_logger: logging.Logger) -> None:
    access_logger.setLevel(logging.INFO)
    quiet_agent_requests()
    quiet_agent_requests()
    assert sum(isinstance(f, QuietAgentRequests) for f in access_logger.filters) == 1
    assert not access_logger.filter(record("/v1/agents/a-1/poll", 200))
    assert access_logger.filter(record("/v1/jobs", 200))
