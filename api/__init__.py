"""The allocation service behind ``interstice serve``.

HPC schedulers report idle and reclaimed nodes, users submit elastic training jobs, admins
tune the objective, and node agents long-poll for ``start``/``rescale``/``stop`` commands.
Every allocation comes from :func:`interstice.optimizer.solve`; state lives in SQLite or
PostgreSQL through SQLAlchemy, its schema in the Alembic migrations of this package.

Modules: :mod:`.settings` (configuration), :mod:`.db` (engine, sessions, migrations),
:mod:`.tables` (SQLAlchemy tables), :mod:`.schemas` (request and response models),
:mod:`.deps` (session and auth dependencies), :mod:`.state` (the state changes: node events,
reclaims, allocations, commands), :mod:`.control` (the control loop and liveness sweeper),
:mod:`.notify` (long-poll wake-ups), :mod:`.metrics` (Prometheus), :mod:`.main` (the app).
"""
