"""Request and response models of the REST API, kept apart from the tables.

One module per resource (:mod:`.nodes`, :mod:`.jobs`, :mod:`.agents`, :mod:`.tokens`,
:mod:`.objective` with the scalability table and the audit log, :mod:`.reports`: stats and
solves), on what :mod:`.common` shares (the base of request bodies, UTC times, bounded
integers, the error body). Per resource: ``<X>Create`` / ``<X>Update`` (request bodies),
``<X>Public`` (one item) and ``<X>sPublic`` (``data`` + ``count``). Times are aware UTC
datetimes (ISO 8601), durations seconds (``*_s``). A class's name and docstring are its
OpenAPI schema's.

Imports: pydantic (with pydantic_core, its own core) and interstice.wire only: no tables, no
FastAPI.
"""
