"""One router per resource: nodes, jobs, agents, objective (with audit), scalability, health."""
