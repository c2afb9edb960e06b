"""Reading one rank's log of a job: its files of every generation, oldest first
(:func:`interstice.wire.rank_log_files`), read as one byte stream on the service's view of
the shared filesystem."""

from pathlib import Path

from interstice.wire import rank_log_files


def read_rank_log(
    job_dir: str | Path, rank: int, *, tail: int, offset: int | None, max_bytes: int
) -> tuple[bytes, int] | None:
    """A piece of global ``rank``'s log, all generations concatenated.

    Args:
        job_dir: the job's directory.
        rank: global rank.
        tail: with ``offset`` None, the last ``tail`` lines (within the last ``max_bytes``).
        offset: byte offset in the concatenated log to read from (at most ``max_bytes``);
            an offset beyond the end reads nothing from the end.
        max_bytes: most bytes read.

    Returns:
        The bytes and their offset in the concatenated log, or None when the rank has no
        log file yet.
    """
    files = rank_log_files(job_dir, rank)
    if not files:
        return None
    sizes = [path.stat().st_size for path in files]
    total = sum(sizes)
    if offset is None:
        start = max(0, total - max_bytes)
        lines = _read(files, sizes, start, total).splitlines(keepends=True)
        data = b"".join(lines[-tail:]) if tail else b""
        return data, total - len(data)
    start = min(offset, total)
    return _read(files, sizes, start, min(total, start + max_bytes)), start


def _read(files: list[Path], sizes: list[int], start: int, end: int) -> bytes:
    """Bytes [start, end) of the concatenation of ``files`` (of ``sizes`` bytes each)."""
    pieces = []
    at = 0
    for path, size in zip(files, sizes, strict=True):
        lo, hi = max(start, at), min(end, at + size)
        if lo < hi:
            with path.open("rb") as f:
                f.seek(lo - at)
                pieces.append(f.read(hi - lo))
        at += size
    return b"".join(pieces)
