"""Alembic environment: URL from the caller's connection, ``sqlalchemy.url`` or the settings."""

from alembic import context
from interstice.api.store.tables import Base
from sqlalchemy import create_engine

target_metadata = Base.metadata


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = context.config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from interstice.api.settings import Settings

    return Settings().db_url


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
elif context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    with create_engine(_url()).connect() as own_connection:
        _run(own_connection)
        own_connection.commit()
