"""The exactly-once check of trained samples, shared by the elastic and the system tests.

Training scripts record what they train as ``epoch index`` lines, one file per rank and
process (``--record-samples`` of examples/train_digits.py); these read them back and say
what breaks exactly-once.
"""

from collections import Counter
from collections.abc import Iterable
from pathlib import Path


def coverage_problems(
    pairs: Iterable[tuple[int, int]], dataset_len: int, complete_epochs: int
) -> list[str]:
    """What breaks exactly-once in trained ``(epoch, index)`` pairs (empty: nothing).

    Epochs ``0 .. complete_epochs - 1`` must hold every index exactly once; any later
    epoch (the partial one in progress) each index at most once.
    """
    counts = Counter(pairs)
    problems = [f"epoch {e} index {i} trained {n} times" for (e, i), n in counts.items() if n > 1]
    for epoch in range(complete_epochs):
        missing = [i for i in range(dataset_len) if (epoch, i) not in counts]
        if missing:
            problems.append(
                f"epoch {epoch}: {len(missing)} indices never trained, e.g. {missing[:5]}"
            )
    return problems


def read_records(folder: Path) -> list[tuple[int, int]]:
    """Every ``epoch index`` line of every record file in ``folder``."""
    pairs = []
    for path in sorted(folder.glob("*.txt")):
        for line in path.read_text().splitlines():
            epoch, index = line.split()
            pairs.append((int(epoch), int(index)))
    return pairs
