"""Atomic file writes: a reader sees the old file or the new one, never a partial one."""

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    Args:
        path: destination file; its folder must exist.
        data: the content; ``str`` is written as UTF-8.

    Raises:
        OSError: the folder is missing or not writable (no temporary file is left).
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(payload)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, payload: Any) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (see :func:`write_atomic`).

    Args:
        path: destination file; its folder must exist.
        payload: JSON-serialisable value.
    """
    write_atomic(path, json.dumps(payload))
