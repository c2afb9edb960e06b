"""The quiet agent's requests without FastAPI's routing and dependency solving.

At 10,000 agents with a 10 s heartbeat the service answers about 1,000 agent requests a
second, nearly all of them from agents with nothing to do: a long-poll with its heartbeat
(``POST /v1/agents/{id}/poll``), a long-poll (``GET .../commands``) or a heartbeat
(``POST .../heartbeat``). Through FastAPI each cost about 15-19x a bare Starlette route
(``bench/agent_requests.py``): matching the path against every route and solving the
dependency tree were most of it. :class:`AgentFastPath` answers those requests itself when
every check passes, calling the same functions as the routes, and hands everything else to
the app unchanged, so that each error (401/403 with its audit, 404, 413, 422) is still the
app's own answer and the OpenAPI document, auth, limits and metrics stay as they are.

A request takes the fast path when all of these hold, else the app answers it:

- the path is one of the three above with an ``a-<n>`` id and the method is the route's;
- the query string is empty or exactly ``wait=<number>`` with 0 <= number <= 60 (``poll`` and
  ``commands`` only);
- ``Authorization: Bearer <token>`` of a known, unexpired, unrevoked token with role ``agent``
  (from the token cache; a token not cached goes to the app, which reads it);
- for the ``POST`` routes, ``Content-Type: application/json`` and a body that parses as
  :class:`~interstice.api.schemas.Heartbeat` the way FastAPI parses it (``json.loads``, then
  validation);
- the agent is known (an unknown one goes to the app, which answers 404).

The middleware sits inside :class:`~interstice.api.limits.BodyLimit` and
:class:`~interstice.api.metrics.RequestLatency` and sets ``scope["route"]`` to the app's own
route, so a fast answer is limited and measured as the app's answer is.
"""

from __future__ import annotations

import json
import re

from fastapi.routing import APIRoute
from interstice.api.routes.agents import WAIT_DEFAULT_S, WAIT_MAX_S, pending_commands, router
from interstice.api.schemas.agents import CommandsPublic, Heartbeat, HeartbeatAnswer
from interstice.api.service import Service
from interstice.api.services import agents
from interstice.api.services.state import parse_id
from interstice.api.store.tables import utcnow
from pydantic import TypeAdapter, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

AGENT_PATH = re.compile(r"/v1/agents/(a-[0-9]{1,15})/(poll|commands|heartbeat)")
"""The path of a quiet agent's request (poll, long-poll, heartbeat): agent id, kind."""
_WAIT = re.compile(rb"wait=([0-9]{1,2}(?:\.[0-9]{1,6})?)")
_METHOD = {"poll": "POST", "commands": "GET", "heartbeat": "POST"}
_COMMANDS_JSON = TypeAdapter(CommandsPublic)
_HEADERS = [(b"content-type", b"application/json")]


class AgentFastPath:
    """ASGI middleware answering a quiet agent's poll, long-poll and heartbeat itself
    (module docstring: when); every other request goes to ``app`` untouched.

    Args:
        app: the app's inner ASGI stack.
        service: the app's :class:`~interstice.api.service.Service`.
    """

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service
        self.routes = {
            kind: route
            for route in router.routes  # the routes of interstice.api.routes.agents
            if isinstance(route, APIRoute)
            for kind in _METHOD
            if route.path == f"/v1/agents/{{agent_id}}/{kind}" and _METHOD[kind] in route.methods
        }
        if len(self.routes) != len(_METHOD):
            raise ValueError(f"the app lacks agent routes: {set(_METHOD) - set(self.routes)}")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            match = AGENT_PATH.fullmatch(scope["path"])
            if match and scope["method"] == _METHOD[match[2]]:
                headers = dict(scope["headers"])
                if self._authorized(headers):
                    await self._take(scope, receive, send, headers, match[1], match[2])
                    return
        await self.app(scope, receive, send)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        """A cached, valid token of role ``agent`` (no database access, no audit: any
        other token goes to the app, which reads, audits and refuses it)."""
        header = headers.get(b"authorization", b"")
        if not header.startswith(b"Bearer "):
            return False
        record = self.service.tokens.cached(header[7:].decode("latin-1"))
        return (
            record is not None
            and record.principal.role == "agent"
            and record.refusal(utcnow()) is None
        )

    async def _take(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        agent_id: str,
        kind: str,
    ) -> None:
        """Answer the request here, or hand it to the app with its body read so far."""
        read: list[Message] = []
        answer = await self._answer(scope, receive, headers, read, agent_id, kind)
        if answer is None:
            await self.app(scope, _replaying(read, receive), send)
            return
        length = [(b"content-length", str(len(answer)).encode()), *_HEADERS]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": answer})

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        headers: dict[bytes, bytes],
        read: list[Message],
        agent_id: str,
        kind: str,
    ) -> bytes | None:
        """The answer's JSON, or None when the app must answer (every message received is
        kept in ``read``)."""
        wait_s = _wait_s(scope["query_string"], kind)
        if wait_s is None:
            return None
        service = self.service
        if kind == "commands":
            number = agents.alive_agent(service, agent_id)
            if number is None:
                return None  # not leased here: the app reads the agent
            service.leases.touch(number)
        else:
            body = await _heartbeat(headers, receive, read)
            if body is None or not agents.renew_lease(service, agent_id, body):
                return None  # a body to refuse, a heartbeat to write, or an unknown agent
            number = parse_id(agent_id, "a")
        scope["route"] = self.routes[kind]
        if kind == "heartbeat":
            return HeartbeatAnswer(agent_id=agent_id, state="alive").model_dump_json().encode()
        commands = await pending_commands(service, number, wait_s)
        return _COMMANDS_JSON.dump_json(commands, by_alias=True)


def _wait_s(query: bytes, kind: str) -> float | None:
    """The ``wait`` of a query the fast path takes (seconds; the routes' default when
    absent), or None for any other query."""
    if not query:
        return float(WAIT_DEFAULT_S)
    match = _WAIT.fullmatch(query) if kind != "heartbeat" else None
    if match is None or float(match[1]) > WAIT_MAX_S:
        return None
    return float(match[1])


async def _heartbeat(
    headers: dict[bytes, bytes], receive: Receive, read: list[Message]
) -> Heartbeat | None:
    """The request's body as FastAPI would take it (``json.loads``, then validation), or
    None when FastAPI would answer otherwise; every message received is kept in ``read``."""
    if headers.get(b"content-type") != b"application/json":
        return None
    chunks = []
    while True:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    try:
        parsed = json.loads(b"".join(chunks))
        return Heartbeat.model_validate(parsed) if isinstance(parsed, dict) else None
    except (ValueError, ValidationError):  # json's errors are ValueErrors
        return None


def _replaying(read: list[Message], receive: Receive) -> Receive:
    """``receive`` that first gives back the messages already read."""
    pending = list(read)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay
