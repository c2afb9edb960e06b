"""The demo's example jobs, kept queued for the whole run.

The examples train a fixed number of samples, so on a fast machine they end in seconds and
the nodes sit idle for the rest of the run, showing no rescale and no reclaim. A research
group keeps submitting; the demo does the same: each example is submitted at the start and
submitted again whenever its latest copy finishes with at least as much of the run left as
that copy took, so the copies the run starts can also end within it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Copy:
    """One submission of an example job.

    Attributes:
        job_id: the service's id (``j-N``).
        name: the job file it was submitted from (an example's: ``examples/<name>.toml``).
        stream: which of the run's examples it continues (its place in ``--jobs``, so that
            an example named twice runs twice at a time).
        submitted_s: seconds into the run when it was submitted.
    """

    job_id: str
    name: str
    stream: int
    submitted_s: float


@dataclass
class ExampleJobs:
    """The example jobs of one run and their copies.

    Attributes:
        submit: submits a job file (its path); the job's id.
        duration_s: the run's length, seconds.
        copies: every copy submitted so far, oldest first.
    """

    submit: Callable[[str], str]
    duration_s: float
    copies: list[Copy] = field(default_factory=list)

    @property
    def names(self) -> dict[str, str]:
        """``{job_id: job file}`` of every copy."""
        return {copy.job_id: copy.name for copy in self.copies}

    def start(self, names: Iterable[str]) -> list[Copy]:
        """Submit one copy of each job file at the run's start; the copies."""
        return [self.add(name, stream, 0.0) for stream, name in enumerate(names)]

    def update(self, jobs: list[dict[str, Any]], elapsed_s: float) -> list[Copy]:
        """Submit again each example whose latest copy has finished, where the run has at
        least as long left as that copy took; the new copies.

        Args:
            jobs: ``GET /v1/jobs``'s ``data`` (a copy absent from it is left alone).
            elapsed_s: seconds into the run now.
        """
        states = {job["job_id"]: job["state"] for job in jobs}
        latest = {copy.stream: copy for copy in self.copies}  # the newest of each stream
        added = []
        for stream, copy in latest.items():
            # first seen finished now, or seen before and refused: the time left only shrinks
            took_s = elapsed_s - copy.submitted_s
            if states.get(copy.job_id) == "finished" and self.duration_s - elapsed_s >= took_s:
                added.append(self.add(copy.name, stream, elapsed_s))
        return added

    def add(self, name: str, stream: int, elapsed_s: float) -> Copy:
        """Submit one copy of ``name`` now, continuing ``stream``."""
        copy = Copy(self.submit(name), name, stream, elapsed_s)
        self.copies.append(copy)
        return copy
