"""``interstice slurm ...``: fill idle nodes with placeholder jobs, render the site's Slurm
files, and the Prolog/Epilog entry points (called by agents/slurm/prolog.sh and epilog.sh).
"""

import os
from pathlib import Path
from time import sleep
from typing import Annotated

import typer

from interstice.errors import fail, token_from_file

slurm_app = typer.Typer(
    help="Slurm integration: placeholder jobs in a scavenger partition, Prolog and Epilog.",
    no_args_is_help=True,
)

ENV_SCHEDULER_TOKEN = "INTERSTICE_SCHEDULER_TOKEN"
"""Environment variable of the scheduler-role token of ``fill --server``."""


PartitionOption = Annotated[str, typer.Option(help="The scavenger partition.")]


@slurm_app.command("conf")
def conf(
    partition: PartitionOption = "scavenger",
    nodes: Annotated[str, typer.Option(help="Nodes of the partition: a node list or ALL.")] = "ALL",
    grace_s: Annotated[
        int, typer.Option(help="GraceTime in seconds: how long a preempted placeholder may hold.")
    ] = 30,
    priority_tier: Annotated[
        int, typer.Option(help="PriorityTier of the partition; others need a higher one.")
    ] = 0,
    max_time: Annotated[str, typer.Option(help="MaxTime of the partition.")] = "INFINITE",
    scripts_dir: Annotated[
        Path | None,
        typer.Option(help="Where prolog.sh and epilog.sh are on the nodes [installed package]."),
    ] = None,
) -> None:
    """Print the slurm.conf fragment of the scavenger partition (append it to slurm.conf)."""
    from interstice.agents.slurm.scripts import ScavengerPartition, render_conf_fragment, slurm_dir

    folder = scripts_dir or slurm_dir()
    settings = ScavengerPartition(
        prolog=folder / "prolog.sh",
        epilog=folder / "epilog.sh",
        partition=partition,
        nodes=nodes,
        grace_s=grace_s,
        priority_tier=priority_tier,
        max_time=max_time,
    )
    try:
        typer.echo(render_conf_fragment(settings), nl=False)
    except ValueError as error:
        fail(str(error))


TimeLimitOption = Annotated[
    str, typer.Option(help="--time of a placeholder job; at its end the node is released.")
]
OutputOption = Annotated[str, typer.Option(help="--output of a placeholder job.")]


@slurm_app.command("sbatch")
def sbatch(
    partition: PartitionOption = "scavenger",
    time_limit: TimeLimitOption = "1-00:00:00",
    output: OutputOption = "/dev/null",
) -> None:
    """Print the placeholder job's batch script (what `fill` submits)."""
    from interstice.agents.slurm.scripts import PlaceholderJob, render_sbatch

    try:
        typer.echo(render_sbatch(PlaceholderJob(partition, time_limit, output)), nl=False)
    except ValueError as error:
        fail(str(error))


@slurm_app.command("fill")
def fill(
    partition: PartitionOption = "scavenger",
    time_limit: TimeLimitOption = "1-00:00:00",
    output: OutputOption = "/dev/null",
    max_jobs: Annotated[
        int | None, typer.Option(min=0, help="Cap on placeholders queued or running.")
    ] = None,
    interval_s: Annotated[float, typer.Option(min=1.0, help="Seconds between passes.")] = 30.0,
    once: Annotated[bool, typer.Option(help="Run one pass and exit.")] = False,
    server: Annotated[
        list[str] | None,
        typer.Option(
            help="Base URL of the service: post each idle node's forecast end (until) from "
            "Slurm's plan; replicas as URL1,URL2 or --server repeated. None: placeholders only.",
            show_default=False,
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help=f"File holding a token of role scheduler (else ${ENV_SCHEDULER_TOKEN}).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Keep one placeholder job queued or running per usable node of the partition.

    Each pass counts the partition's usable nodes (sinfo) and its pending or running
    placeholders (squeue, by job name) and submits the difference (sbatch), printing one line.
    With --server, the pass then reads Slurm's plan (squeue --start: pending jobs' StartTime
    and SchedNodes; scontrol show res: reservations) and posts, for each node the service
    shows idle, an idle event whose until is the earliest planned start that takes the node,
    or withdraws (until null) one it posted that the plan no longer has; a second line says
    so. Its first pass takes the forecasts the service holds for idle nodes of the partition
    as its own, so after a restart it withdraws those the plan no longer gives. A line of
    Slurm's output it cannot read (or a start after 2100) is left out with a warning on
    stderr, and the pass's line counts them. Runs until interrupted, a failed pass reported
    on stderr and retried; with --once, one pass, and a failure exits with code 2.
    """
    from interstice.agents.client import ServiceClient, ServiceRejected, ServiceUnavailable
    from interstice.agents.slurm.fill import SlurmCommandError, fill_once, run_slurm
    from interstice.agents.slurm.plan import Posted, forecast_pass
    from interstice.agents.slurm.scripts import PlaceholderJob

    job = PlaceholderJob(partition, time_limit, output)
    servers = [url.strip() for given in server or [] for url in given.split(",") if url.strip()]
    client = ServiceClient(servers, _scheduler_token(token_file)) if servers else None
    posted = Posted()
    failures = (SlurmCommandError, ServiceRejected, ServiceUnavailable)
    while True:
        try:
            outcome = fill_once(job, max_jobs)
            typer.echo(
                f"partition {partition}: {outcome.nodes} usable nodes, {outcome.queued} "
                f"placeholders queued or running, submitted {len(outcome.submitted)}"
                + (f" ({', '.join(outcome.submitted)})" if outcome.submitted else "")
                + _left_out(outcome.dropped)
            )
            if client is not None:
                seen = forecast_pass(
                    run_slurm,
                    lambda *a, **k: client.call(*a, give_up_after_s=interval_s, **k),
                    posted,
                    partition,
                )
                typer.echo(
                    f"forecasts: {seen.planned} nodes wanted back by Slurm's plan, "
                    f"posted {seen.posted}, withdrawn {seen.withdrawn}" + _left_out(seen.dropped)
                )
        except Exception as error:
            # A passing fault (slurmctld restarting) must not end the loop: retry next pass.
            # Nor must one this code did not foresee: the loop outlives any pass.
            message = str(error) if isinstance(error, failures) else f"{error!r}"
            if once:
                fail(message)
            typer.echo(f"error: {' '.join(message.split())}", err=True)
        if once:
            return
        sleep(interval_s)


def _left_out(notes: tuple[str, ...]) -> str:
    """Each note of a line left out, on stderr; the count for the pass's line."""
    for note in notes:
        typer.echo(f"warning: {' '.join(note.split())}", err=True)
    return f", Slurm lines left out: {len(notes)}" if notes else ""


def _scheduler_token(token_file: Path | None) -> str:
    """The scheduler token from ``--token-file``, else :data:`ENV_SCHEDULER_TOKEN`; exits
    with code 2 naming the option where neither gives one."""
    token = os.environ.get(ENV_SCHEDULER_TOKEN, "")
    if token_file is not None:
        token = token_from_file(token_file)
    if not token:
        fail(f"--token-file: give a scheduler token (or ${ENV_SCHEDULER_TOKEN}) with --server")
    return token


@slurm_app.command("prolog")
def prolog() -> None:
    """Start the node's agent for a placeholder job (run by agents/slurm/prolog.sh).

    Reads SLURM_JOB_ID, SLURMD_NODENAME and SLURM_JOB_PARTITION, and the configuration file
    (INTERSTICE_AGENT_CONF, default /etc/interstice/agent.conf; keys: server_url,
    agent_token, partition, grace_s, interstice_bin, workdir, state_dir, agent_user,
    preemption_signal). Does nothing for jobs of other partitions.
    """
    from interstice.agents.slurm.config import AgentConfError, conf_path, load_agent_conf
    from interstice.agents.slurm.env import SlurmEnvError, read_job_env
    from interstice.agents.slurm.hooks import start_agent

    try:
        job = read_job_env(os.environ)
        pid = start_agent(load_agent_conf(conf_path(os.environ)), job)
    except (SlurmEnvError, AgentConfError, OSError) as error:
        fail(f"prolog: {error}")
    if pid is not None:
        typer.echo(f"prolog: job {job.job_id}: agent of node {job.node} started, pid {pid}")


@slurm_app.command("epilog")
def epilog() -> None:
    """Stop the job's agent within grace_s, then kill what is left of it (run by epilog.sh).

    Sends the configured preemption signal (SIGTERM) to the agent the Prolog started for
    SLURM_JOB_ID, waits up to grace_s for it to release its node and exit, then kills what is
    left: the agent and every process it started (they carry INTERSTICE_SLURM_JOB_ID). Does
    nothing for jobs without an agent.
    """
    from interstice.agents.slurm.config import AgentConfError, conf_path, load_agent_conf
    from interstice.agents.slurm.env import SlurmEnvError, read_env
    from interstice.agents.slurm.hooks import agent_log, stop_agent

    try:
        job_id = read_env(os.environ, "job_id")
        conf = load_agent_conf(conf_path(os.environ))
        stopped = stop_agent(conf, job_id)
    except (SlurmEnvError, AgentConfError, OSError) as error:
        fail(f"epilog: {error}")
    if stopped is None:
        return
    if not stopped.signalled:
        verdict = "had already exited"
    elif stopped.exited_within_grace:
        verdict = f"exited {stopped.waited_s:.2f} s after the signal"
    else:
        verdict = f"was killed {stopped.waited_s:.2f} s after the signal (grace ended)"
    line = f"epilog: job {job_id}: agent pid {stopped.pid} {verdict}"
    typer.echo(line)
    with open(agent_log(conf, job_id), "a") as log:
        print(line, file=log)
