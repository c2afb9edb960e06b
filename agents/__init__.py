"""Node agents: what turns an allocation of the service into training on the nodes.

- ``interstice agent`` (``agents.cli`` -> ``agents.agent``): one per node; registers with the
  service, heartbeats what its workers report, long-polls commands (``agents.client``,
  ``agents.protocol``; docs/reference/agent-protocol.md) and runs them: start, rescale, stop.
- each generation of a job (one rendezvous, one world size) on this node runs in a launcher
  process under PyTorch elastic's launcher API (c10d rendezvous, gloo on CPU, nccl on GPU):
  ``agents.launcher`` keeps a spare launcher warm and hands it the generation,
  ``agents.launch_config`` builds what it runs (argv, env, cwd; refuses what cannot run),
  ``agents.launcher_process`` is that process, ``agents.forked_main`` what its forked
  workers run, ``agents.rank_logs`` where their output goes; ``agents.generation`` is the
  agent's record of it and its workers, ``agents.outcome`` how it ended,
  ``agents.stopping`` stops it (the run directory's stop file, ``agents.rundir``; SIGTERM)
  and kills it past its deadline.
- ``agents.worker`` (``python -m interstice.agents.worker``): the training entry point;
  resumes from the job's checkpoint, trains a model of ``interstice.models``, and stops
  with every rank at the same step, so a rescale neither loses nor repeats one.
- ``agents.local_cluster``: a service and a few agents on one machine (end-to-end test,
  rescale benchmark).
- ``agents.slurm``: the Slurm prolog/epilog and placeholder jobs that start the agents.

Imports: torch (in the launcher process and the worker), httpx (the client),
interstice.models, interstice.elastic and the shared interstice.wire, interstice.files,
interstice.errors and interstice.ports; never interstice.api, the web stack or a database:
the agent speaks to the service over HTTP only (tests/test_import_rules.py).
"""
