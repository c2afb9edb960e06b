"""The node-state trace: loading the gzip CSV once, and cutting a replay window from it.

Layout of the input (``summit-node-state-2021-02.csv.gz``, see ``shared/data/README.md``):
columns ``timestamp,node,state``; the rows at the first timestamp give every node's state, every
later row is a change to ``idle`` or ``busy``. Loading parses the text once with :mod:`csv`,
converts timestamps with numpy's ``datetime64`` and maps host names to integer ids, so the
846,856 changes of the real trace load in about a second without pandas.
"""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEADER = ["timestamp", "node", "state"]
STATES = ("idle", "busy")


@dataclass(frozen=True)
class NodeTrace:
    """A whole node-state trace, nodes as integer ids.

    Attributes:
        start: first timestamp (the initial snapshot), ``datetime64[s]``.
        end: last timestamp, ``datetime64[s]``.
        node_names: host names, shape (N,), sorted; a node's id is its index here.
        initial_idle: whether each node is idle at ``start``, bool, shape (N,).
        change_time_s: seconds after ``start`` of each later change, int64, shape (M,),
            nondecreasing.
        change_node: node id of each change, int32, shape (M,).
        change_idle: whether the node became idle (else busy), bool, shape (M,).
    """

    start: np.datetime64
    end: np.datetime64
    node_names: np.ndarray
    initial_idle: np.ndarray
    change_time_s: np.ndarray
    change_node: np.ndarray
    change_idle: np.ndarray

    @property
    def duration_s(self) -> int:
        """Seconds from the first to the last timestamp."""
        return int((self.end - self.start) / np.timedelta64(1, "s"))

    def window(
        self, start_s: float, end_s: float, node_ids: np.ndarray | None = None
    ) -> TraceWindow:
        """Cut the replay input for ``[start_s, end_s)`` seconds after :attr:`start`.

        Args:
            start_s: window start, seconds after :attr:`start`, in ``[0, duration_s)``.
            end_s: window end, seconds after :attr:`start`, ``> start_s``.
            node_ids: ids of the nodes to keep, shape (n,); ``None`` keeps all of them.

        Returns:
            The nodes' states at ``start_s`` (changes at or before it applied) and the changes
            strictly inside the window, grouped by timestamp, with node ids renumbered
            ``0..n-1`` in the order of ``node_ids``.

        Raises:
            ValueError: an empty or inverted window, or a node id out of range.
        """
        if not 0 <= start_s < end_s:
            raise ValueError(f"window [{start_s}, {end_s}) s is empty or starts before the trace")
        n_all = len(self.node_names)
        ids = np.arange(n_all) if node_ids is None else np.asarray(node_ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= n_all):
            raise ValueError(f"node ids must lie in 0..{n_all - 1}")
        local = np.full(n_all, -1, dtype=np.int32)
        local[ids] = np.arange(len(ids), dtype=np.int32)

        idle = self.initial_idle.copy()
        before = np.searchsorted(self.change_time_s, start_s, side="right")
        # Later rows overwrite earlier ones for the same node, as replaying them in order would.
        idle[self.change_node[:before]] = self.change_idle[:before]
        last_change_s = np.zeros(n_all)
        np.maximum.at(last_change_s, self.change_node[:before], self.change_time_s[:before])
        idle_since_s = np.where(idle, last_change_s - start_s, np.nan)

        lo, hi = before, np.searchsorted(self.change_time_s, end_s, side="left")
        times = self.change_time_s[lo:hi]
        nodes = local[self.change_node[lo:hi]]
        keep = nodes >= 0
        times, nodes, to_idle = times[keep], nodes[keep], self.change_idle[lo:hi][keep]
        event_times_s, first = np.unique(times, return_index=True)
        return TraceWindow(
            start=self.start + np.timedelta64(int(start_s), "s"),
            duration_s=float(end_s - start_s),
            node_names=self.node_names[ids],
            initial_idle=idle[ids],
            initial_idle_since_s=idle_since_s[ids],
            event_time_s=(event_times_s - start_s).astype(np.float64),
            event_offsets=np.append(first, len(times)).astype(np.int64),
            change_node=nodes,
            change_idle=to_idle,
        )

    def idle_intervals(self) -> tuple[np.ndarray, np.ndarray]:
        """Every completed idle interval of every node (idle, then busy again).

        Returns:
            ``(end_s, length_s)``: when each interval ended (seconds after :attr:`start`,
            ascending) and how long it lasted, float64 arrays of shape (K,). Intervals still
            open at the end of the trace are left out.
        """
        n_all = len(self.node_names)
        start_s, end_s, _ = completed_idle_runs(
            self.initial_idle,
            np.zeros(n_all),
            self.change_time_s,
            self.change_node,
            self.change_idle,
        )
        length_s = end_s - start_s
        by_end = np.argsort(end_s, kind="stable")
        return end_s[by_end], length_s[by_end]


def completed_idle_runs(
    initial_idle: np.ndarray,
    initial_since_s: np.ndarray,
    change_time_s: np.ndarray,
    change_node: np.ndarray,
    change_idle: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The completed idle runs of every node: idle, then busy again.

    Args:
        initial_idle: whether each node is idle at the start, bool, shape (N,).
        initial_since_s: when each node's state at the start began, seconds (only read for
            idle nodes: the start of a run already open), shape (N,).
        change_time_s: time of each later row, seconds, shape (M,), nondecreasing.
        change_node: node id of each row, shape (M,).
        change_idle: whether the row makes its node idle (else busy), bool, shape (M,); a
            row that restates a node's state changes nothing.

    Returns:
        ``(start_s, end_s, open_runs)``: the start and end of each completed run, float64
        arrays of shape (K,) in node order, and how many runs are still open after the last
        row.
    """
    n_all = len(initial_idle)
    node = np.concatenate([np.arange(n_all), change_node])
    time_s = np.concatenate([np.asarray(initial_since_s, dtype=np.float64), change_time_s])
    idle = np.concatenate([initial_idle, change_idle])
    # By node, then row order (initial rows first): the rows are in time order already, and
    # the times of busy nodes' initial rows may be NaN, which a sort on time would misplace.
    order = np.lexsort((np.arange(len(node)), node))
    node, time_s, idle = node[order], time_s[order], idle[order]
    same_node = np.concatenate([[False], node[1:] == node[:-1]])
    was_idle = np.concatenate([[False], idle[:-1]]) & same_node
    starts = np.flatnonzero(idle & ~was_idle)  # first row of each run of idle rows
    ends = np.flatnonzero(~idle & was_idle)  # first busy row after such a run
    # Runs alternate within a node, so each end closes the last start before it.
    opened = starts[np.searchsorted(starts, ends) - 1]
    return time_s[opened], time_s[ends], len(starts) - len(ends)


@dataclass(frozen=True)
class TraceWindow:
    """The replay input: node states at the window start and the changes after it.

    Attributes:
        start: wall-clock start of the window, ``datetime64[s]``.
        duration_s: window length, seconds.
        node_names: host names of the kept nodes, shape (n,).
        initial_idle: whether each kept node is idle at the window start, bool, shape (n,).
        initial_idle_since_s: when each idle node's last change before the window start
            happened, seconds relative to the window start (<= 0; the trace start if it never
            changed); NaN for busy nodes; float64, shape (n,).
        event_time_s: seconds after the window start of each event (one per distinct
            timestamp), float64, shape (E,), ascending, in ``(0, duration_s)``.
        event_offsets: event ``e``'s changes are ``[event_offsets[e], event_offsets[e+1])``,
            int64, shape (E+1,).
        change_node: local node id of each change, int32, shape (C,).
        change_idle: whether the node became idle (else busy), bool, shape (C,).
    """

    start: np.datetime64
    duration_s: float
    node_names: np.ndarray
    initial_idle: np.ndarray
    initial_idle_since_s: np.ndarray
    event_time_s: np.ndarray
    event_offsets: np.ndarray
    change_node: np.ndarray
    change_idle: np.ndarray

    def changes(self, event: int) -> tuple[np.ndarray, np.ndarray]:
        """Event ``event``'s ``(node ids, became idle)`` arrays."""
        lo, hi = self.event_offsets[event], self.event_offsets[event + 1]
        return self.change_node[lo:hi], self.change_idle[lo:hi]


def load_trace(path: Path) -> NodeTrace:
    """Read a node-state trace CSV, gzip-compressed when its name ends in ``.gz``.

    Args:
        path: the CSV file (columns ``timestamp,node,state``; LF or CRLF line ends).

    Returns:
        The trace; rows are stably sorted by timestamp if they were not already.

    Raises:
        OSError: the file cannot be read.
        ValueError: not gzip or not UTF-8, a wrong header, a row without three fields, a bad
            timestamp or state (the message names the line), fewer than two distinct
            timestamps, or a node with no state at the first timestamp.
    """
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path.name}: not a gzip file ({exc})") from None
    try:
        text = raw.decode().replace("\r\n", "\n")
    except UnicodeDecodeError:
        raise ValueError(f"{path.name}: not UTF-8 text") from None
    header, _, body = text.partition("\n")
    if header.split(",") != HEADER:
        raise ValueError(f"{path.name}: header must be {','.join(HEADER)}")
    body = body.rstrip("\n")
    if not body:
        raise ValueError(f"{path.name}: no rows")
    times, names, to_idle = _parse_columns(body, path.name)

    order = np.argsort(times, kind="stable")
    times, names, to_idle = times[order], names[order], to_idle[order]
    node_names, node_ids = np.unique(names, return_inverse=True)
    start, end = times[0], times[-1]
    if start == end:
        raise ValueError(f"{path.name}: every row has the same timestamp; no changes to replay")
    n_initial = int(np.searchsorted(times, start, side="right"))
    initial_idle = np.zeros(len(node_names), dtype=bool)
    seen = np.zeros(len(node_names), dtype=bool)
    initial_idle[node_ids[:n_initial]] = to_idle[:n_initial]
    seen[node_ids[:n_initial]] = True
    if not seen.all():
        missing = str(node_names[~seen][0])
        raise ValueError(
            f"{path.name}: node {missing!r} has no state at the first timestamp {start}"
        )
    return NodeTrace(
        start=start,
        end=end,
        node_names=node_names,
        initial_idle=initial_idle,
        change_time_s=((times[n_initial:] - start) / np.timedelta64(1, "s")).astype(np.int64),
        change_node=node_ids[n_initial:].astype(np.int32),
        change_idle=to_idle[n_initial:],
    )


def _parse_columns(body: str, file_name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(timestamps datetime64[s], host names, became idle)`` of the rows in ``body``.

    The fast path splits the whole text at once (no per-row Python work); any inconsistency
    sends it to :func:`_check_rows`, which reads row by row to name the offending line.
    """
    fields = body.replace("\n", ",").split(",")
    n_rows = body.count("\n") + 1
    if len(fields) == 3 * n_rows:
        states = np.array(fields[2::3])
        to_idle = states == "idle"
        try:
            times = np.array(fields[0::3], dtype="datetime64[s]")
        except ValueError:
            times = None
        if times is not None and not np.isnat(times).any() and (to_idle | (states == "busy")).all():
            return times, np.array(fields[1::3]), to_idle
    _check_rows(body, file_name)
    raise ValueError(f"{file_name}: unsupported CSV layout (quoted fields?)")


def _check_rows(body: str, file_name: str) -> None:
    """Raise ``ValueError`` naming the first line that is not ``timestamp,node,idle|busy``."""
    for line, row in enumerate(csv.reader(io.StringIO(body)), start=2):
        if len(row) != 3:
            raise ValueError(f"{file_name} line {line}: expected 3 fields, got {len(row)}")
        stamp, _, state = row
        try:
            parsed = np.datetime64(stamp, "s")
        except ValueError:
            parsed = np.datetime64("NaT")
        if np.isnat(parsed):
            raise ValueError(f"{file_name} line {line}: bad timestamp {stamp!r}")
        if state not in STATES:
            raise ValueError(f"{file_name} line {line}: state {state!r} is neither idle nor busy")
