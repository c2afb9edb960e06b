"""``--record-samples DIR``: what each process trains, for exactly-once checks.

Each process appends one ``epoch index`` line (two decimal integers) per sample it trains to
``DIR/rank<R>-pid<P>.txt``, flushed after every optimizer step. A restarted or rescaled run
writes new files beside the old ones (another pid), so the folder ends up holding every
sample trained by every run of a job: each index of each epoch should appear once.
"""

import argparse
import os
from collections.abc import Iterable
from pathlib import Path


class SampleRecorder:
    """Appends trained ``(epoch, index)`` pairs to ``folder/rank<rank>-pid<pid>.txt``.

    Args:
        folder: the ``--record-samples`` folder, created if missing; ``None`` (the flag not
            given) records nothing.
        rank: this process's global rank, part of the file's name.

    Raises:
        OSError: the folder or its file cannot be created.

    Example, a step's share from ``ElasticSampler.current_share()``:

    >>> recorder = SampleRecorder(Path("records"), rank=0)
    >>> recorder.write([(0, 17), (0, 3)])
    >>> print(next(Path("records").glob("rank0-pid*.txt")).read_text(), end="")
    0 17
    0 3
    >>> SampleRecorder(None, rank=0).write([(0, 5)])  # no folder: nothing written
    """

    def __init__(self, folder: Path | None, rank: int) -> None:
        self.file = None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            self.file = open(folder / f"rank{rank}-pid{os.getpid()}.txt", "a")

    @staticmethod
    def add_argument(parser: argparse.ArgumentParser) -> None:
        """Adds ``--record-samples DIR`` (a ``Path``, default ``None``) to ``parser``."""
        parser.add_argument("--record-samples", type=Path, help="append 'epoch index' lines here")

    def write(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Appends one ``epoch index`` line per pair (the samples of the step just trained)
        and flushes, so that a process killed later still leaves what it trained."""
        if self.file is not None:
            self.file.write("".join(f"{epoch} {index}\n" for epoch, index in pairs))
            self.file.flush()
