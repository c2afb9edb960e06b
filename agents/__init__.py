"""Node agents: what turns an allocation of the service into training on the nodes.

- ``interstice agent`` (``agents.cli`` -> ``agents.agent``): one per node; registers with the
  service, heartbeats what its workers report, long-polls commands (``agents.client``,
  ``agents.protocol``; docs/agent-protocol.md) and runs them: start, rescale, stop.
- ``agents.launcher``: each generation of a job (one rendezvous, one world size) on this
  node, launched with PyTorch elastic's launcher API (c10d rendezvous, gloo on CPU, nccl on
  GPU) from a pre-started launcher process, stopped through the run directory's stop file
  (``agents.rundir``), killed past its deadline.
- ``agents.worker`` (``python -m interstice.agents.worker``): the training entry point;
  resumes from the job's checkpoint, trains a model of ``interstice.models``, and stops
  with every rank at the same step, so a rescale neither loses nor repeats one.
- ``agents.local_cluster``: a service and a few agents on one machine (end-to-end test,
  rescale benchmark).
- ``agents.slurm``: the Slurm prolog/epilog and placeholder jobs that start the agents.
"""
