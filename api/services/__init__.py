"""The service layer: what each route does, one module per resource.

:mod:`.nodes` (with :mod:`.ingest`, the scheduler's node events in bulk), :mod:`.jobs` (with
:mod:`.idempotency` and :mod:`.logs`), :mod:`.agents`, :mod:`.objective`, :mod:`.scalability`,
:mod:`.reports` (audit, gauges, with :mod:`.history` and :mod:`.stats`); all of them change
state through :mod:`.state`, the transitions each inside one write transaction (moves of
jobs, reclaims, commands). Functions take the running
:class:`~interstice.api.service.Service`, run one transaction and hand its
:class:`~interstice.api.services.state.Changes` to ``Service.after_commit``; they raise
:class:`~interstice.api.services.state.NotFound` or
:class:`~interstice.api.services.state.Conflict`, which the app maps to 404 and 409.

Imports: interstice.api.store, interstice.api.schemas, interstice.api.auth,
interstice.api.limits, interstice.api.service (for type hints), interstice.optimizer and
interstice.wire; never FastAPI or Starlette (the routes speak HTTP), never the control loop.
"""
