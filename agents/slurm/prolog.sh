#!/bin/bash
# Slurm Prolog of interstice: start the node's agent for a placeholder job.
#
# slurmd runs this as root, outside the job, before a job's first step on this node. For a job
# of the scavenger partition it runs `interstice slurm prolog`, which starts
# `interstice agent --report-idle` in a session of its own (setsid) and records its pid in
# <state_dir>/agent-<job_id>.pid, where the Epilog finds it. The agent is not a process of the
# job: the agent token stays out of user jobs. How preemption reaches it: see epilog.sh.
#
# Configuration: /etc/interstice/agent.conf (mode 0640, root:<SlurmUser>), or the file named
# by INTERSTICE_AGENT_CONF. Keys: see `interstice slurm prolog --help` and agents/slurm/config.py.
#
# Always exits 0: a non-zero Prolog drains the node, and a fault of interstice must not take a
# node away from the cluster. Faults go to syslog (tag interstice-prolog) and stderr.
set -u
. "$(dirname "$(readlink -f "$0")")/hook.sh"

# Fast path for every other job of the cluster: no Python start-up. This and epilog.sh's
# SLURM_JOB_ID are the only Slurm variables read outside interstice.agents.slurm.env.
[ "${SLURM_JOB_PARTITION:-}" = "$(conf_value partition scavenger)" ] || exit 0

run_hook prolog
exit 0
