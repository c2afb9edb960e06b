"""One router per resource: nodes, jobs, agents, objective (with audit), scalability,
tokens, solves, stats, health and the dashboard (``ui``). Each route validates, calls one
function of the service layer and maps its errors to HTTP.

Imports: interstice.api.deps, interstice.api.service, interstice.api.services,
interstice.api.schemas and interstice.api.auth; never the store or the control loop.
"""
