"""The service's durable state: SQLAlchemy tables (:mod:`.tables`), the engine, its sessions
and the write lock (:mod:`.db`), and the Alembic migrations (``migrations/``, with
``alembic.ini`` for developers writing one), the same on SQLite and PostgreSQL.

Imports: SQLAlchemy, Alembic and interstice.api.settings (the migrations' default URL);
nothing of the layers above it and no FastAPI.
"""
