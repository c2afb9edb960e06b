"""Slurm integration: what starts an agent on an idle node and ends it on preemption.

- ``env``: every Slurm environment variable read, in one mapping; node-list parsing.
- ``config``: the site's agent configuration (``/etc/interstice/agent.conf``).
- ``scripts``: the placeholder sbatch script and the slurm.conf fragment of the scavenger
  partition, rendered from the templates beside this package's modules.
- ``hooks``: the Prolog (start the node's agent) and the Epilog (stop it within the grace).
- ``fill``: keeps one placeholder job queued per usable scavenger node.
- ``accounting``: sacct's job allocations and sacctmgr's node events, read as intervals.
- ``cli``: ``interstice slurm ...``.

The shell scripts (``prolog.sh``, ``epilog.sh``, ``hook.sh``) and templates
(``placeholder.sbatch``, ``slurm.conf.fragment``) are package data of this package.

Imports: interstice.agents (its client), the shared interstice.wire, interstice.errors and
interstice.ports; never torch: the hooks run before any training (tests/test_import_rules.py).
"""
