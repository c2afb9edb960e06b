"""Atomic file writes: a reader sees the old file or the new one, whole, never a part."""

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` through ``write`` into a temporary file beside it, then rename it.

    The temporary file (``.<name>.<pid>.tmp`` in the same folder, so the rename stays on one
    filesystem) is flushed and fsynced before ``os.replace``; it is removed if ``write``
    fails. The folder is created (mode 0700) if absent.

    Args:
        path: destination file.
        write: called with the open binary temporary file.

    Raises:
        OSError: the folder or file cannot be written (the destination is left untouched).

    Example:
        >>> import tempfile, pathlib
        >>> from interstice.elastic.atomic import write_atomic
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
        >>> write_atomic(target, lambda f: f.write(b"hello"))
        >>> target.read_text()
        'hello'
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp_path = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp_path, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
