"""Every Slurm environment variable interstice reads, and Slurm node-list parsing.

All ``SLURM_*`` reads of the project happen here, through :data:`SLURM_ENV`, a mapping from
our field names to Slurm's variable names (the variables slurmd sets for a Prolog and Epilog,
see slurm.conf(5), "Prolog and Epilog Scripts"). The functions are pure: they take the
environment as a mapping and raise :class:`SlurmEnvError` or :class:`NodeListError` on bad
input, so they are tested without Slurm.

Node lists are Slurm's "hostlist expressions" (``scontrol show hostnames``): comma-separated
names in which a bracket holds comma-separated numbers or ranges, zero padding kept, e.g.
``a01n[01-03],b02n05`` is ``a01n01 a01n02 a01n03 b02n05``; a name may hold several brackets
(``r[1-2]n[1-2]`` is the cross product, the last bracket varying fastest).
"""

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import chain, product
from math import prod

SLURM_ENV: dict[str, str] = {
    "job_id": "SLURM_JOB_ID",
    "node": "SLURMD_NODENAME",
    "partition": "SLURM_JOB_PARTITION",
}
"""Our name -> the Slurm environment variable that holds it (set by slurmd for Prolog/Epilog)."""

MAX_NODES_PER_EXPRESSION = 1_000_000
"""A bound on the names one expression may expand to, so a typo cannot exhaust memory."""

QUOTED_MAX_CHARS = 100
"""Characters of an expression quoted in an error message."""

_RANGE = re.compile(r"^(\d{1,18})(?:-(\d{1,18}))?$")  # 18 digits: far past any node number


class SlurmEnvError(ValueError):
    """A Slurm environment variable that interstice needs is missing or malformed."""


class NodeListError(ValueError):
    """A Slurm node-list (hostlist) expression that cannot be parsed."""


@dataclass(frozen=True)
class SlurmJobEnv:
    """What a Prolog or Epilog learns about its job from slurmd's environment.

    Attributes:
        job_id: the Slurm job id (``SLURM_JOB_ID``), digits.
        node: this node's name as Slurm knows it (``SLURMD_NODENAME``).
        partition: the job's partition (``SLURM_JOB_PARTITION``); empty where unset.
    """

    job_id: str
    node: str
    partition: str


def read_env(environ: Mapping[str, str], name: str) -> str:
    """The value of one of our Slurm fields, read through :data:`SLURM_ENV`.

    Args:
        environ: the process environment (``os.environ`` or a test's dict).
        name: one of our names, a key of :data:`SLURM_ENV`.

    Returns:
        The variable's value, stripped.

    Raises:
        KeyError: ``name`` is not a key of :data:`SLURM_ENV` (a programming error).
        SlurmEnvError: the variable is unset or empty.
    """
    variable = SLURM_ENV[name]
    value = environ.get(variable, "").strip()
    if not value:
        raise SlurmEnvError(f"{variable} is unset or empty (needed for the {name})")
    return value


def read_job_env(environ: Mapping[str, str]) -> SlurmJobEnv:
    """The job's id, node and partition from a Prolog's or Epilog's environment.

    Args:
        environ: the process environment (``os.environ`` or a test's dict).

    Returns:
        The job's :class:`SlurmJobEnv`.

    Raises:
        SlurmEnvError: ``SLURM_JOB_ID`` or ``SLURMD_NODENAME`` is unset or empty, or the job id
            is not a number (an array task's id is still a plain number in a Prolog).
    """
    job_id = read_env(environ, "job_id")
    if not job_id.isdigit():
        raise SlurmEnvError(f"{SLURM_ENV['job_id']}={job_id!r} is not a job number")
    node = read_env(environ, "node")
    partition = environ.get(SLURM_ENV["partition"], "").strip()
    return SlurmJobEnv(job_id=job_id, node=node, partition=partition)


def parse_node_list(expression: str) -> list[str]:
    """Expand a Slurm node-list expression into node names, in order.

    The names are counted from the brackets' ranges before any is built, so an expression
    such as ``r[1-999999]n[1-999999]`` (each bracket within the bound, their product 10^12)
    is refused at the cost of reading it.

    Args:
        expression: e.g. ``"a01n[01-03],b02n05"``; surrounding whitespace is ignored and an
            empty expression is an empty list.

    Returns:
        The node names, e.g. ``["a01n01", "a01n02", "a01n03", "b02n05"]``; a range keeps the
        zero padding of its lower bound (``[08-10]`` is ``08 09 10``).

    Raises:
        NodeListError: an unbalanced or nested bracket, an empty name or bracket item, a range
            whose end is below its start, a non-numeric range, or an expression of more than
            :data:`MAX_NODES_PER_EXPRESSION` names.
    """
    items = [_parse_name(item, expression) for item in _split_top_level(expression.strip())]
    count = sum(prod(_count(bracket) for bracket in brackets) for _, brackets in items)
    if count > MAX_NODES_PER_EXPRESSION:
        raise NodeListError(
            f"node list {quoted(expression)} is too long: it expands to {count} names, more "
            f"than {MAX_NODES_PER_EXPRESSION}"
        )
    return [
        "".join(chain.from_iterable(zip(literals, numbers, strict=True)))
        for literals, brackets in items
        for numbers in product(*(list(_numbers(bracket)) for bracket in brackets), [""])
    ]


def node_names(output: str, command: str, dropped: list[str]) -> set[str]:
    """The names of ``output``'s node lists, one a line (``sinfo -o %N``); a line that is not
    a node list (:func:`parse_node_list` refuses it) is left out with a note in ``dropped``
    naming ``command``, so one bad line never hides the others."""
    names: set[str] = set()
    for line in output.splitlines():
        try:
            names.update(parse_node_list(line))
        except NodeListError as error:
            dropped.append(f"{command}: left out {quoted(line)}: {error}")
    return names


def _split_top_level(expression: str) -> list[str]:
    """Split at the commas outside brackets; raises NodeListError on bad brackets."""
    if not expression:
        return []
    items, depth, start = [], 0, 0
    for position, char in enumerate(expression):
        if char == "[":
            depth += 1
            if depth > 1:
                raise NodeListError(f"nested '[' at position {position} in {quoted(expression)}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise NodeListError(f"unmatched ']' at position {position} in {quoted(expression)}")
        elif char == "," and depth == 0:
            items.append(expression[start:position])
            start = position + 1
    if depth:
        raise NodeListError(f"unclosed '[' in {quoted(expression)}")
    items.append(expression[start:])
    for item in items:
        if not item.strip():
            raise NodeListError(f"empty node name in {quoted(expression)}")
    return [item.strip() for item in items]


Bracket = list[tuple[range, int]]
"""A bracket's ranges, each with the width its numbers are zero-padded to."""


def _parse_name(item: str, expression: str) -> tuple[list[str], list[Bracket]]:
    """One name (its brackets checked by :func:`_split_top_level`) as its literals, one more
    than its brackets, and its brackets (``a[1-2]b``: ``["a", "b"]`` and the bracket ``1-2``)."""
    pieces = re.split(r"\[([^\]]*)\]", item)  # literal, bracket, literal, ..., literal
    return pieces[::2], [_parse_bracket(bracket, expression) for bracket in pieces[1::2]]


def _parse_bracket(bracket: str, expression: str) -> Bracket:
    """``"01-03,7"`` -> ``[(range(1, 4), 2), (range(7, 8), 1)]``; raises NodeListError on a
    bad item."""
    ranges: Bracket = []
    for part in bracket.split(","):
        match = _RANGE.match(part.strip())
        if match is None:
            raise NodeListError(f"bad range {quoted(part)} in {quoted(expression)}")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise NodeListError(
                f"range {quoted(part)} ends below its start in {quoted(expression)}"
            )
        ranges.append((range(int(low), int(high) + 1), len(low)))
    return ranges


def _count(bracket: Bracket) -> int:
    return sum(len(numbers) for numbers, _ in bracket)


def _numbers(bracket: Bracket) -> Iterator[str]:
    for numbers, width in bracket:
        for number in numbers:
            yield str(number).zfill(width)


def quoted(text: str) -> str:
    """``text`` quoted for a message, cut to :data:`QUOTED_MAX_CHARS` characters (a node list
    of a hostile line may be megabytes long)."""
    if len(text) <= QUOTED_MAX_CHARS:
        return repr(text)
    return repr(text[:QUOTED_MAX_CHARS]) + f"... ({len(text)} characters)"
