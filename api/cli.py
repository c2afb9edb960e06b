"""``interstice serve``, ``interstice token create|list|revoke`` and ``interstice db upgrade``.

Heavy imports (FastAPI, uvicorn, SQLAlchemy, the solvers) happen inside the commands, so
``interstice --help`` stays light.
"""

import errno
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
    from interstice.api.store import db
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

    Takes its port first (a port in use is one line and exit code 2, before anything else),
    then waits for the database and upgrades it to the newest migration. The URL is printed
    once the service listens; OpenAPI docs are at /docs. Ctrl-C or SIGTERM stops it: requests
    in flight get 2 s to answer, a second Ctrl-C closes the unanswered ones at once.
    """
    import uvicorn
    from interstice.api import access_log, serving
    from interstice.api.main import create_app

    settings = _settings(config, db_url=db, host=host, port=port)
    if settings.auth_munge:
        from interstice.api.auth.munge import MungeUnavailable, check_daemon

        try:
            check_daemon(settings.munge_socket)
        except MungeUnavailable as exc:
            where = settings.munge_socket or "its default socket"
            fail(f"INTERSTICE_AUTH_MUNGE is on but munged ({where}) does not answer: {exc}")
    try:
        listener = serving.listen(settings.host, settings.port)
    except OSError as exc:
        reason = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        fail(f"port {settings.port} on {settings.host}: {reason}")
    _database(settings).dispose()
    app = create_app(settings)
    typer.echo(
        f"interstice serving on http://{settings.host}:{settings.port} (db {settings.db_url})"
    )
    config = uvicorn.Config(
        serving.Quiet(app),
        log_level=settings.log_level,
        # agents reuse one connection between heartbeats and long-polls: keep it open
        # longer than both, so a request never races the server closing an idle one
        timeout_keep_alive=int(max(75, 3 * settings.heartbeat_interval_s)),
    )
    access_log.quiet_agent_requests()  # after the config, which sets up uvicorn's loggers
    server = serving.Server(
        config,
        # long-polls answer now, so none is still open (and dropped) at the deadline
        on_shutdown=app.state.service.notifier.close,
    )
    try:
        server.run(sockets=[listener])
    except KeyboardInterrupt:  # a Ctrl-C between two of uvicorn's handlers
        pass
    if not server.started:
        fail(f"could not start serving on {settings.host}:{settings.port} (see above)")


@token_app.command("create")
def token_create(
    role: Annotated[str, typer.Option(help="scheduler, agent, user or admin.")],
    name: Annotated[
        str | None,
        typer.Option(help="Who holds it: letters, digits, _.:@- (default: the role)."),
    ] = None,
    expires_in: Annotated[
        str | None,
        typer.Option("--expires-in", help="Lifetime: 30d, 12h, 90m, 3600s or 2w (default: never)."),
    ] = None,
    unix_user: Annotated[
        str | None,
        typer.Option(
            "--unix-user",
            help="Unix account a user/admin token acts as (its jobs run as it); required "
            "for user tokens in multi-user mode.",
        ),
    ] = None,
    unix_uid: Annotated[
        int | None,
        typer.Option("--unix-uid", help="That account's uid (default: looked up here)."),
    ] = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Create a bearer token of ROLE and print it once; the database keeps only its hash.
    Audited (actor: command line)."""
    from interstice.api.auth.tokens import create_token, parse_duration_s
    from interstice.api.schemas.tokens import TokenCreate
    from pydantic import ValidationError

    from interstice.wire import TOKEN_ROLES

    if role not in TOKEN_ROLES:
        fail(f"--role must be one of {', '.join(TOKEN_ROLES)}, got {role!r}")
    try:
        expires_in_s = None if expires_in is None else parse_duration_s(expires_in)
        body = TokenCreate(
            name=name or role,
            role=role,  # type: ignore[arg-type]
            expires_in_s=expires_in_s,
            unix_user=unix_user,
            unix_uid=unix_uid,
        )
    except ValueError as exc:  # ValidationError included
        if isinstance(exc, ValidationError):
            error = exc.errors()[0]
            field = str(error["loc"][0]).replace("_", "-").removesuffix("-s")
            fail(f"--{field}: {error['msg']}")
        fail(f"--expires-in: {exc}")
    from interstice.api.auth.unix import token_account

    settings = _settings(config, db_url=db)
    try:
        account = token_account(
            role, unix_user, unix_uid, settings.munge_min_uid, settings.multi_user
        )
    except ValueError as exc:
        field, _, message = str(exc).partition(": ")
        fail(f"--{field.replace('_', '-')}: {message}")
    database = _database(settings)
    typer.echo(create_token(database, body.role, body.name, body.expires_in_s, unix=account))
    database.dispose()


@token_app.command("list")
def token_list(db: DbOption = None, config: ConfigOption = None) -> None:
    """One line per token, oldest first: id, name, role, created, expires, revoked (UTC).
    Never a secret: only hashes are stored."""
    from interstice.api.auth.tokens import list_tokens, public_id

    database = _database(_settings(config, db_url=db))
    for t in list_tokens(database):
        typer.echo(
            f"{public_id(t.principal.token_id)} name={t.principal.name} role={t.principal.role} "
            f"created={_when(t.created_at)} expires={_when(t.expires_at, 'never')} "
            f"revoked={_when(t.revoked_at, 'no')}"
            + ("" if t.principal.unix_uid is None else f" unix={t.principal.unix_name}")
        )
    database.dispose()


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id, t-<n>.")],
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Revoke a token: refused (401) at once by a service in this database, within 1 s by
    one that had it cached. Idempotent. Audited (actor: command line)."""
    from interstice.api.auth.tokens import revoke_token

    database = _database(_settings(config, db_url=db))
    try:
        record = revoke_token(database, token_id)
    except LookupError as exc:
        fail(str(exc))
    finally:
        database.dispose()
    typer.echo(f"{token_id} revoked at {_when(record.revoked_at)}")


def _when(at: Any, none: str = "-") -> str:
    """``at`` as ISO 8601 UTC to the second, or ``none``."""
    return none if at is None else at.strftime("%Y-%m-%dT%H:%M:%SZ")


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None, config: ConfigOption = None) -> None:
    """Create or upgrade the database schema to the newest migration."""
    settings = _settings(config, db_url=db)
    _database(settings).dispose()
    typer.echo(f"database {settings.db_url} is at the newest migration")
