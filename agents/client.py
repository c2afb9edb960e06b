"""The node agent's client of the service's REST API (docs/reference/agent-protocol.md), over httpx.

Every call goes through :meth:`ServiceClient.call`, which retries (tenacity) a service that is
down or answers 5xx with exponential backoff (0.2 s doubling to at most ``max_backoff_s``), so the
agent survives a service restart; a 4xx is final and raised as :class:`ServiceRejected`
(a 404 on an agent path means "register again"). Given several replicas' URLs, a try that
cannot reach one (connection refused or reset, timeout) moves to the next for this and later
calls: the agent fails over to another replica of the same database.
"""

import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import tenacity

FIRST_BACKOFF_S = 0.2


class ServiceRejected(RuntimeError):
    """The service answered 4xx: retrying the same request will not help."""

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(f"service answered {status_code}: {detail}")
        self.status_code = status_code


class ServiceUnavailable(RuntimeError):
    """The service could not be reached (or answered 5xx) before the time allowed ran out."""


class _ServerError(Exception):
    """The service answered 5xx (retried like a connection error)."""


class ServiceClient:
    """The agent-role calls of the API, each retried while the service is unreachable.

    Args:
        server: base URL of the service, e.g. ``http://127.0.0.1:8000``, or the URLs of its
            replicas, tried in turn (the first one first).
        token: bearer token of role ``agent``.
        max_backoff_s: longest wait between two tries, seconds.
        transport: an httpx transport (tests pass ``httpx.MockTransport``).
    """

    def __init__(
        self,
        server: str | Sequence[str],
        token: str,
        *,
        max_backoff_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        servers = [server] if isinstance(server, str) else list(server)
        if not servers:
            raise ValueError("server: give at least one URL")
        self._bases = [url.rstrip("/") + "/v1" for url in servers]
        self._current = 0
        self._http = httpx.Client(
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
        timeout = httpx.Timeout(10.0, read=read_timeout_s)
        started = time.monotonic()
        failures: list[str] = []

        def out_of_time(retry_state: tenacity.RetryCallState) -> bool:
            """Stop before a wait that would end past ``give_up_after_s``, or on request."""
            upcoming_s = retry_state.upcoming_sleep or 0.0
            return should_stop() or (
                give_up_after_s is not None
                and time.monotonic() - started + upcoming_s > give_up_after_s
            )

        def one_try() -> httpx.Response:
            base = self._bases[self._current]
            try:
                response = self._http.request(
                    method, base + path, json=json, params=params, timeout=timeout
                )
            except httpx.TransportError as error:
                failures.append(f"{base}: {type(error).__name__}: {error}")
                self._current = (self._bases.index(base) + 1) % len(self._bases)
                raise
            if response.status_code >= 500:
                failures.append(f"{response.status_code} {response.text[:200]}")
                raise _ServerError()
            return response

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type((httpx.TransportError, _ServerError)),
            wait=tenacity.wait_exponential(multiplier=FIRST_BACKOFF_S, max=self.max_backoff_s),
            stop=out_of_time,
            reraise=False,
        )
        try:
            response = retrying(one_try)
        except tenacity.RetryError as error:
            raise ServiceUnavailable(f"{method} {path}: {failures[-1]}") from error
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

    def poll_with_heartbeat(
        self, agent_id: str, wait_s: float, body: dict[str, Any], **retry: Any
    ) -> list[dict[str, Any]]:
        """``POST /agents/{id}/poll?wait=`` (protocol version 3): a heartbeat with ``body``
        and a long-poll in one request; the pending commands, oldest first."""
        answer = self.call(
            "POST",
            f"/agents/{agent_id}/poll",
            json=body,
            params={"wait": wait_s},
            read_timeout_s=wait_s + 10.0,
            **retry,
        )
        return answer["data"]

    def ack(
        self,
        agent_id: str,
        command_id: int,
        ok: bool,
        error: str | None,
        job_failed: bool = False,
        node_fault: bool = False,
        **retry: Any,
    ) -> None:
        """``POST /agents/{id}/commands/{command_id}/ack``; ``job_failed``: the command was
        refused for a reason of the job itself (the service fails the job at once);
        ``node_fault``: for a reason of this node (the service quarantines it and places the
        job elsewhere)."""
        body: dict[str, Any] = {"ok": ok, "error": error, "job_failed": job_failed}
        if node_fault:  # said only when true: a service older than the field refuses it
            body["node_fault"] = True
        self.call("POST", f"/agents/{agent_id}/commands/{command_id}/ack", json=body, **retry)

    def leave(self, agent_id: str, **retry: Any) -> None:
        """``DELETE /agents/{id}``: this node leaves; the service releases it."""
        self.call("DELETE", f"/agents/{agent_id}", **retry)
