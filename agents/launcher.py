"""The agent's launcher processes: one spare kept warm, handed the next generation to run.

Each generation of a job (one rendezvous, one world size) runs in one launcher process,
``python -m interstice.agents.launcher_process``, which runs torch elastic's launcher API
(:mod:`interstice.agents.launcher_process`). This module starts such processes ahead, tells
when one is warm, hands one a generation's config (:meth:`Launcher.launch`) and closes the
spare.

Why a pre-started ("spare") launcher: importing torch and torchvision takes 2-10 s (20-30 s
on a loaded 2-core machine, scikit-learn another 7 s there), most of a rescale's cost. The
agent keeps one launcher process started with torch imported and a fork server holding
torch, the models and the worker, blocked on its stdin; a start or rescale writes the
generation's config to it (one JSON line), and the agent starts the next spare once the new
workers trained their first step (or 5 s after they joined), so its imports do not slow their
start. An agent registers only once its first spare is warm (:meth:`Launcher.wait_ready`),
so the first start on a fresh node does not pay the imports either.

A spare runs as one account and serves only jobs of that account. A job that names an owner
(multi-user mode) runs as that owner (:mod:`interstice.agents.owner`): its launcher is a
fresh ``exec`` of Python as the owner, never a fork of the agent (root, holding the token)
nor a spare of another account, and its workers are forks of that launcher's own fork
server. The spare is kept for the account of the job launched last: the next command of a
node is most often a rescale of the same job, which then pays no imports. The agent's first
spare runs as the agent's account, so on a node whose jobs have owners, the first start of
each owner's job on the node pays the imports (and closes a spare of another account).
"""

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from interstice.agents import outcome, rundir
from interstice.agents.generation import Generation
from interstice.agents.launch_config import NodeSettings, generation_config, job_base_environment
from interstice.agents.launcher_process import SPARE_READY
from interstice.agents.owner import Account, file_gid, file_uid, job_account, popen_identity
from interstice.agents.protocol import Command
from interstice.agents.stopping import kill
from interstice.agents.user_folder import ensure_user_folder

from interstice import wire

LAUNCHER_MODULE = "interstice.agents.launcher_process"


class Launcher:
    """Starts generations of this node's workers, each from a warm spare launcher process.

    Args:
        settings: what this node tells every generation (workdir, node, host, ports, ...).
    """

    def __init__(self, settings: NodeSettings) -> None:
        self.settings = settings
        self._spare: tuple[subprocess.Popen, Path] | None = None
        self._spare_account: Account | None = None
        self._account: Account | None = None  # of the job launched last: the next spare's
        self._launches = 0
        # The launchers' logs: the agent's alone (a job's launcher writes its own through the
        # descriptor it is given), so no job reads another's.
        logs = settings.workdir / "logs"
        logs.mkdir(mode=0o700, parents=True, exist_ok=True)
        logs.chmod(0o700)

    def warm(self, account: Account | None = None, *, last: bool = False) -> None:
        """Start a spare launcher (torch imported, waiting for its config) if none runs for
        the account.

        Args:
            account: the account the spare runs as (None: the agent's own); a spare of
                another account is closed first.
            last: warm for the account of the job launched last instead.
        """
        if last:
            account = self._account
        if self._spare is not None and self._spare[0].poll() is None:
            if self._spare_account == account:
                return
            self.close_spare()
        self._launches += 1
        log_path = self.settings.workdir / "logs" / f"launcher-{os.getpid()}-{self._launches}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", LAUNCHER_MODULE],
                # torch elastic's rendezvous and worker events, timed, in the launcher log
                env={**job_base_environment(self.settings, account), "LOGLEVEL": "INFO"},
                stdin=subprocess.PIPE,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed as one
                **popen_identity(account),  # type: ignore[arg-type]
            )
        self._spare = (process, log_path)
        self._spare_account = account

    def spare_ready(self) -> bool:
        """Whether the spare launcher finished its imports (a launch now is fast)."""
        return self._spare is not None and spare_ready(self._spare[1])

    def spare_failure(self) -> str | None:
        """Why the spare launcher exited before it was warm (its exit code and its log's last
        lines, e.g. torch missing), or None: no spare, or one warm or still warming up."""
        if self._spare is None:
            return None
        process, log_path = self._spare
        returncode = process.poll()
        if returncode is None or spare_ready(log_path):
            return None
        tail = outcome.log_tail(log_path, os.geteuid())  # the agent's own file
        return outcome.clip(
            f"its launcher exited warming up (exit {returncode}); last lines of its log:\n{tail}"
        )

    def wait_ready(self, timeout_s: float, should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Wait until the spare launcher finished its imports, at most ``timeout_s``.

        Returns early (False) when there is no spare, when it exited (it never will be
        ready: e.g. torch missing) or on ``should_stop()``.

        Returns:
            Whether a ready spare waits.
        """
        deadline = time.monotonic() + timeout_s
        while not self.spare_ready():
            spare = self._spare
            if spare is None or spare[0].poll() is not None or should_stop():
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def close_spare(self) -> None:
        """Let the spare launcher exit (it exits when its stdin closes); one still importing
        torch holds no work and is killed after half a second, so a release within the
        grace period never waits on it. Its process group goes with it: the launcher exits
        without waiting for its fork server, which holds torch and would take seconds to
        tear down on its own."""
        if self._spare is not None:
            process, _ = self._spare
            _close_quietly(process.stdin)
            try:
                process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
            kill(process)
            self._spare = None

    def launch(self, command: Command) -> Generation:
        """Start this node's workers of ``command`` (a start or rescale) on the spare.

        Args:
            command: a validated start or rescale command.

        Returns:
            The running generation.

        Raises:
            BadCommand: with ``job_failed``: the job's command cannot run (see
                :func:`interstice.agents.launch_config.generation_config`); without: the
                job cannot run as its owner on this node
                (:func:`interstice.agents.owner.job_account`), its run directory cannot
                be made (:func:`interstice.agents.rundir.prepare`), or the owner's folder
                in the checkpoint root is missing and cannot be made safely
                (:func:`interstice.agents.user_folder.ensure_user_folder`). Nothing was
                started.
        """
        assert command.job is not None and command.rendezvous_endpoint is not None
        account = job_account(command.job.owner, self.settings.node)
        run_dir = wire.run_dir(self.settings.workdir, command.job_id)
        # raises before anything starts
        config = generation_config(command, self.settings, account)
        ensure_user_folder(command.job.job_dir, account, self.settings.node)
        rundir.prepare(run_dir, file_uid(account), file_gid(account))
        rundir.clear(run_dir)
        self.warm(account)
        assert self._spare is not None
        process, log_path = self._spare
        self._spare = None
        self._account = account
        # The launcher writes it as the job's account: in the job's run directory.
        result_path = run_dir / f"{log_path.stem}.result.json"
        config["result_path"] = str(result_path)
        try:
            assert process.stdin is not None
            process.stdin.write((json.dumps(config) + "\n").encode())
            process.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died: the agent sees the exit code and acknowledges the error
        return Generation(
            command=command,
            process=process,
            run_dir=run_dir,
            job_dir=Path(command.job.job_dir),
            log_path=log_path,
            result_path=result_path,
            account=account,
        )


def spare_ready(log_path: Path) -> bool:
    """Whether the launcher logging to ``log_path`` is a spare that finished its imports
    and has not been used (its log holds the ready line and nothing else)."""
    try:
        return log_path.read_text().strip() == SPARE_READY
    except OSError:
        return False


def _close_quietly(stream: IO[bytes] | None) -> None:
    if stream is not None:
        try:
            stream.close()
        except OSError:
            pass
