"""The node agent's client of the service's REST API (docs/agent-protocol.md), over httpx.

Every call goes through :meth:`ServiceClient.call`, which retries a service that is down or
answers 5xx with exponential backoff (0.2 s doubling to at most ``max_backoff_s``), so the
agent survives a service restart; a 4xx is final and raised as :class:`ServiceRejected`
(a 404 on an agent path means "register again").
"""

import time
from collections.abc import Callable
from typing import Any

import httpx

FIRST_BACKOFF_S = 0.2


class ServiceRejected(RuntimeError):
    """The service answered 4xx: retrying the same request will not help."""

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(f"service answered {status_code}: {detail}")
        self.status_code = status_code


class ServiceUnavailable(RuntimeError):
    """The service could not be reached (or answered 5xx) before the time allowed ran out."""


class ServiceClient:
    """The agent-role calls of the API, each retried while the service is unreachable.

    Args:
        server: base URL of the service, e.g. ``http://127.0.0.1:8000``.
        token: bearer token of role ``agent``.
        max_backoff_s: longest wait between two tries, seconds.
        transport: an httpx transport (tests pass ``httpx.MockTransport``).
    """

    def __init__(
        self,
        server: str,
        token: str,
        *,
        max_backoff_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=server.rstrip("/") + "/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(10.0),
            transport=transport,
        )
        self.max_backoff_s = max_backoff_s

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        read_timeout_s: float = 10.0,
        give_up_after_s: float | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Any:
        """One request, retried with backoff while the service is down or answers 5xx.

        Args:
            method: HTTP method.
            path: path under ``/v1``.
            json: request body.
            params: query parameters.
            read_timeout_s: how long one try waits for the answer (long-polls wait longer).
            give_up_after_s: stop retrying after this many seconds (None: retry until
                ``should_stop``).
            should_stop: polled between tries; True stops retrying.

        Returns:
            The decoded JSON answer (None for an empty body).

        Raises:
            ServiceRejected: the service answered 4xx.
            ServiceUnavailable: no answer before ``give_up_after_s`` or ``should_stop``.
        """
        started = time.monotonic()
        backoff_s = FIRST_BACKOFF_S
        timeout = httpx.Timeout(10.0, read=read_timeout_s)
        while True:
            try:
                response = self._http.request(
                    method, path, json=json, params=params, timeout=timeout
                )
                if response.status_code < 500:
                    break
                reason = f"{response.status_code} {response.text[:200]}"
            except httpx.TransportError as error:
                reason = f"{type(error).__name__}: {error}"
            out_of_time = (
                give_up_after_s is not None
                and time.monotonic() - started + backoff_s > give_up_after_s
            )
            if out_of_time or should_stop():
                raise ServiceUnavailable(f"{method} {path}: {reason}")
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, self.max_backoff_s)
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise ServiceRejected(response.status_code, str(detail))
        return response.json() if response.content else None

    def register(self, body: dict[str, Any], **retry: Any) -> dict[str, Any]:
        """``POST /agents``: register (or re-register) this node; returns the agent record."""
        return self.call("POST", "/agents", json=body, **retry)

    def heartbeat(self, agent_id: str, body: dict[str, Any], **retry: Any) -> None:
        """``POST /agents/{id}/heartbeat`` with what the workers report."""
        self.call("POST", f"/agents/{agent_id}/heartbeat", json=body, **retry)

    def poll_commands(self, agent_id: str, wait_s: float, **retry: Any) -> list[dict[str, Any]]:
        """``GET /agents/{id}/commands?wait=``: the pending commands, oldest first."""
        answer = self.call(
            "GET",
            f"/agents/{agent_id}/commands",
            params={"wait": wait_s},
            read_timeout_s=wait_s + 10.0,
            **retry,
        )
        return answer["data"]

    def ack(
        self, agent_id: str, command_id: int, ok: bool, error: str | None, **retry: Any
    ) -> None:
        """``POST /agents/{id}/commands/{command_id}/ack``."""
        self.call(
            "POST",
            f"/agents/{agent_id}/commands/{command_id}/ack",
            json={"ok": ok, "error": error},
            **retry,
        )

    def leave(self, agent_id: str, **retry: Any) -> None:
        """``DELETE /agents/{id}``: this node leaves; the service releases it."""
        self.call("DELETE", f"/agents/{agent_id}", **retry)
