#!/bin/bash
# Slurm Epilog of interstice: stop the node's agent when its placeholder job ends.
#
# The preemption path: a job of a higher-PriorityTier partition needs the node; slurmctld
# sends SIGTERM to the placeholder's job step (`srun sleep infinity`, see placeholder.sbatch);
# the step and then the job end; slurmd runs this Epilog as root. `interstice slurm epilog`
# sends the agent the preemption signal (SIGTERM), waits up to grace_s for it to release its
# node to the service and exit, then kills it and its workers. The node stays COMPLETING until
# this returns, so the preempting job never shares the node with the agent.
#
# Always exits 0: a non-zero Epilog drains the node. Faults go to syslog (tag
# interstice-epilog) and stderr.
set -u
. "$(dirname "$(readlink -f "$0")")/hook.sh"

# Fast path for every job that is not a placeholder: the Prolog left no pid file.
[ -f "$(conf_value state_dir /run/interstice)/agent-${SLURM_JOB_ID:-none}.pid" ] || exit 0

run_hook epilog
exit 0
