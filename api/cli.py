"""PLACEHOLDER: replaced by the service helper."""

import typer

token_app = typer.Typer(help="Bearer tokens per role.")
db_app = typer.Typer(help="Database schema (Alembic migrations).")


def serve() -> None:
    """Not built yet."""
    raise NotImplementedError
