"""Who may call: bearer tokens (:mod:`.tokens`: creation, listing, revocation, the cached
lookup and the audit of refusals) and the per-role check of every authenticated request
(:mod:`.bearer`, which the routes take through :mod:`interstice.api.deps`).

Imports: interstice.api.store and interstice.api.schemas, FastAPI for the check.
"""
