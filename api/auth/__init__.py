"""Who may call: bearer tokens (:mod:`.tokens`: creation, listing, revocation, the cached
lookup and the audit of refusals), MUNGE credentials of the centre's users (:mod:`.munge`,
decoded by munged), the Unix accounts they map to (:mod:`.unix`), and the per-role check of
every authenticated request (:mod:`.bearer`, which the routes take through
:mod:`interstice.api.deps`).

Imports: interstice.api.store, interstice.api.schemas and the client's interstice.munge (one
way to make a credential), FastAPI for the check.
"""
