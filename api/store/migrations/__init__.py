"""Alembic migrations of the service's schema (``interstice db upgrade``; ``serve`` runs them)."""
