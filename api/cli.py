"""``interstice serve``, ``interstice token create`` and ``interstice db upgrade``.

Heavy imports (FastAPI, uvicorn, SQLAlchemy, the solvers) happen inside the commands, so
``interstice --help`` stays light.
"""

from pathlib import Path
from typing import Annotated, Any

import typer

from interstice.errors import fail

token_app = typer.Typer(help="Bearer tokens per role.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="SQLAlchemy URL (default sqlite:///./interstice.db)."),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="TOML file with settings (keys as INTERSTICE_* without it)."),
]


def _settings(config: Path | None, **flags: Any) -> Any:
    """Settings from flags, environment and ``config``; exits with one line on a bad value."""
    from interstice.api.settings import load_settings
    from pydantic import ValidationError

    try:
        return load_settings(config, **{k: v for k, v in flags.items() if v is not None})
    except FileNotFoundError as exc:
        fail(str(exc))
    except ValidationError as exc:
        error = exc.errors()[0]
        fail(f"setting {'.'.join(map(str, error['loc']))}: {error['msg']}")
    except ValueError as exc:  # a malformed TOML file
        fail(f"config file {config}: {exc}")


def _database(settings: Any) -> Any:
    """The database, reachable and upgraded to the newest migration; exits when unreachable."""
    from interstice.api import db
    from sqlalchemy.exc import SQLAlchemyError

    database = db.Database(settings.db_url)
    try:
        db.wait_until_reachable(database.engine, settings.db_wait_s)
        db.upgrade(database.engine)
    except SQLAlchemyError as exc:
        fail(f"database {settings.db_url}: {str(exc).splitlines()[0]}")
    return database


def serve(
    db: DbOption = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on (127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="TCP port (8000).")] = None,
    config: ConfigOption = None,
) -> None:
    """Run the allocation service (REST API, control loop, metrics) until interrupted.

    Waits for the database and upgrades it to the newest migration first. The URL is
    printed once the service listens; OpenAPI docs are at /docs.
    """
    import uvicorn
    from interstice.api.main import create_app

    settings = _settings(config, db_url=db, host=host, port=port)
    _database(settings).dispose()
    app = create_app(settings)
    typer.echo(
        f"interstice serving on http://{settings.host}:{settings.port} (db {settings.db_url})"
    )
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=2,
        # agents reuse one connection between heartbeats and long-polls: keep it open longer
        # than both, so a request never races the server closing an idle connection
        timeout_keep_alive=int(max(75, 3 * settings.heartbeat_interval_s)),
    )


@token_app.command("create")
def token_create(
    role: Annotated[str, typer.Option(help="scheduler, agent, user or admin.")],
    name: Annotated[str | None, typer.Option(help="Who holds it (default: the role).")] = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Create a bearer token of ROLE and print it once; the database keeps only its hash."""
    from interstice.api.service import create_token

    roles = ("scheduler", "agent", "user", "admin")
    if role not in roles:
        fail(f"--role must be one of {', '.join(roles)}, got {role!r}")
    database = _database(_settings(config, db_url=db))
    typer.echo(create_token(database, role, name or role))
    database.dispose()


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None, config: ConfigOption = None) -> None:
    """Create or upgrade the database schema to the newest migration."""
    settings = _settings(config, db_url=db)
    _database(settings).dispose()
    typer.echo(f"database {settings.db_url} is at the newest migration")
