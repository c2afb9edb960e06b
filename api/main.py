"""Builds the FastAPI app: routers, error mapping, metrics middleware, and the lifespan
that waits for the database, upgrades it to the newest migration and runs the control loop."""

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from interstice.api import limits
from interstice.api.agent_fast_path import AgentFastPath
from interstice.api.collector import freezing_every
from interstice.api.control.loop import ControlLoop, Solver, optimizer_solver
from interstice.api.deps import known_query
from interstice.api.metrics import Metrics, RequestLatency
from interstice.api.routes import (
    agents,
    docs,
    health,
    jobs,
    nodes,
    objective,
    scalability,
    solves,
    stats,
    tokens,
    ui,
    usage,
)
from interstice.api.security_headers import SecurityHeaders
from interstice.api.service import Service
from interstice.api.services.state import Conflict, NotFound
from interstice.api.settings import Settings
from interstice.api.store import db as database
from starlette.exceptions import HTTPException


def create_app(settings: Settings | None = None, solver: Solver | None = None) -> FastAPI:
    """The service's app.

    Args:
        settings: configuration; default from the environment.
        solver: ``solver(problem, backend) -> Allocation``; default
            :func:`interstice.optimizer.solve` (tests inject a slow stub).
    """
    settings = settings or Settings()
    metrics = Metrics()
    service = Service(database.Database(settings.db_url), settings, metrics)
    control = ControlLoop(service, solver or optimizer_solver)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        def prepare() -> None:
            database.wait_until_reachable(service.db.engine, settings.db_wait_s)
            database.upgrade(service.db.engine)
            service.bootstrap()

        await anyio.to_thread.run_sync(prepare)
        service.poll_reads = anyio.CapacityLimiter(16)
        service.event_writes = anyio.CapacityLimiter(4)
        await control.start()
        service.acks.start()
        try:
            async with freezing_every(settings.gc_freeze_interval_s):
                yield
        finally:
            await service.acks.stop()
            await control.stop()
            service.db.dispose()

    app = FastAPI(
        title="interstice",
        version="1",
        summary="Fills a supercomputer's transient idle nodes with elastic training jobs.",
        lifespan=lifespan,
        dependencies=[Depends(known_query)],
        docs_url=None,  # served by routes.docs from the package's own copies, not a CDN
        redoc_url=None,
    )
    app.state.service = service
    app.state.control = control
    routers = (nodes, jobs, agents, objective, solves, scalability, stats, usage, health, tokens)
    for module in (*routers, ui, docs):
        app.include_router(module.router)
    app.mount(ui.STATIC_PATH, ui.static_files(), name="ui-static")
    if settings.agent_fast_path:  # innermost: limited and measured as the routes are
        app.add_middleware(AgentFastPath, service=service)
    app.add_middleware(RequestLatency, metrics=metrics)
    app.add_middleware(limits.BodyLimit)
    app.add_middleware(SecurityHeaders)
    default_openapi = app.openapi
    app.openapi = lambda: limits.document_too_large(default_openapi())  # type: ignore[method-assign]

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Any:
        if exc.status_code == 405:  # every method of the path, not the first route's
            allow = ", ".join(limits.allowed_methods(app.router.routes, request.scope))
            exc.headers = (exc.headers or {}) | {"Allow": allow}
        return await http_exception_handler(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own answer, except that a NaN or infinite input it echoes is written as
        # a string: JSON has no such numbers, and encoding them would turn a 422 into a 500
        # (quoting at most a prefix of the input: see limits.shorten_errors)
        errors = _finite(jsonable_encoder(limits.shorten_errors(list(exc.errors()))))
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)

    return app


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by its name (``"nan"``, ``"inf"``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
