"""The allocation service behind ``interstice serve``.

HPC schedulers report idle and reclaimed nodes, users submit elastic training jobs, admins
tune the objective, and node agents long-poll for ``start``/``rescale``/``stop`` commands.
Every allocation comes from :func:`interstice.optimizer.solve`; state lives in SQLite or
PostgreSQL through SQLAlchemy, its schema in Alembic migrations.

A request goes down three layers: :mod:`.routes` (one router per resource: validate, call one
service function, map its errors to HTTP) → :mod:`.services` (the service layer: one module
per resource, each write one transaction) → :mod:`.store` (the tables, the engine and its
sessions, the migrations). Beside them:

- :mod:`.schemas`: the request and response bodies, one module per resource.
- :mod:`.auth`: bearer tokens and the per-role check of every request.
- :mod:`.control`: what runs beside the requests: the control loop (solves on the leader),
  leader election, the agents' leases and their sweep, long-poll wake-ups and their relay
  between replicas, acknowledgements written in batches.

The app itself is this package's top level: :mod:`.main` (``create_app``), :mod:`.service`
(the :class:`~interstice.api.service.Service` every part shares), :mod:`.deps` (the routes'
dependencies), :mod:`.settings`, :mod:`.limits` (request limits), :mod:`.metrics`
(Prometheus), :mod:`.collector` (the garbage collector's regime), :mod:`.serving` (listen and
stop) and :mod:`.cli` (``interstice serve``, ``token``, ``db upgrade``); the dashboard's
static files are in ``ui/``.

Imports: its own modules, interstice.optimizer and the shared interstice.wire,
interstice.data, interstice.errors and interstice.munge (the MUNGE command's wrapper);
never torch, so never interstice.agents, interstice.models or interstice.elastic
(tests/test_import_rules.py, with each layer's rule).
"""
