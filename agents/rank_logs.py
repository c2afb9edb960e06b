"""Where a worker's output goes: global rank R's stdout and stderr, together, into
``wire.rank_log_path(job_dir, rendezvous_id, R)``, and torch's error file (``@record``) of
rank R beside it as ``rank-R.error.json``.

torch's ``LogsSpecs`` opens stdout and stderr as two files (a second handle on one file would
overwrite the first), so stderr joins stdout in the worker itself: a function worker
``dup2``s it (:mod:`interstice.agents.forked_main`), a binary runs under :data:`MERGE_STDERR`.
"""

from typing import Any

from interstice import wire

# A binary worker runs as `sh -c 'exec "$@" 2>&1' ...`: torch's LogsSpecs opens stdout and
# stderr as two files, so stderr joins stdout in the rank log here (exec: same pid).
MERGE_STDERR = ("/bin/sh", "-c", 'exec "$@" 2>&1', "interstice-worker")


def rank_logs_specs(job_dir: str, rendezvous_id: str) -> Any:
    """torch ``LogsSpecs`` writing global rank R's stdout to ``wire.rank_log_path`` (see the
    module docstring)."""
    from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs

    class RankLogsSpecs(LogsSpecs):
        def __init__(self) -> None:
            super().__init__(log_dir=str(wire.logs_dir(job_dir)))

        @property
        def root_log_dir(self) -> str:
            return str(wire.logs_dir(job_dir))

        def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
            destination = LogsDest()
            for local_rank, env in envs.items():
                path = wire.rank_log_path(job_dir, rendezvous_id, int(env["RANK"]))
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                error_file = path.with_suffix(".error.json")
                error_file.unlink(missing_ok=True)
                destination.stdouts[local_rank] = str(path)
                destination.stderrs[local_rank] = ""  # merged into stdout by the worker
                destination.error_files[local_rank] = str(error_file)
                env["TORCHELASTIC_ERROR_FILE"] = str(error_file)
            return destination

    return RankLogsSpecs()
