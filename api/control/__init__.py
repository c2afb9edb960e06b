"""What runs beside the requests, and what ties the replicas of one database together.

:mod:`.loop` (the control loop: coalesce events, solve off the event loop, apply the
allocation in one transaction; the lease sweep), :mod:`.leader` (which replica solves: a
PostgreSQL advisory lock), :mod:`.leases` (the agents' leases in memory, written in bulk by
the sweep, which marks silent agents lost), :mod:`.notify` (long-poll wake-ups and their relay
between replicas over ``LISTEN``/``NOTIFY``), :mod:`.acks` (command acknowledgements written
in batches), :mod:`.solver_process` (the leader's builds and solves, in a child process).

Imports: interstice.api.services, interstice.api.store, interstice.api.settings,
interstice.api.schemas, interstice.api.service and interstice.optimizer; no FastAPI.
"""
