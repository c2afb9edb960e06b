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
from collections.abc import Mapping
from dataclasses import dataclass

SLURM_ENV: dict[str, str] = {
    "job_id": "SLURM_JOB_ID",
    "node": "SLURMD_NODENAME",
    "partition": "SLURM_JOB_PARTITION",
}
"""Our name -> the Slurm environment variable that holds it (set by slurmd for Prolog/Epilog)."""

MAX_NODES_PER_EXPRESSION = 1_000_000
"""A bound on the names one expression may expand to, so a typo cannot exhaust memory."""

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


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
    names: list[str] = []
    for item in _split_top_level(expression.strip()):
        names.extend(_expand_name(item, expression))
        if len(names) > MAX_NODES_PER_EXPRESSION:
            raise NodeListError(
                f"node list {expression!r} expands to more than {MAX_NODES_PER_EXPRESSION} names"
            )
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
                raise NodeListError(f"nested '[' at position {position} in {expression!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise NodeListError(f"unmatched ']' at position {position} in {expression!r}")
        elif char == "," and depth == 0:
            items.append(expression[start:position])
            start = position + 1
    if depth:
        raise NodeListError(f"unclosed '[' in {expression!r}")
    items.append(expression[start:])
    for item in items:
        if not item.strip():
            raise NodeListError(f"empty node name in {expression!r}")
    return [item.strip() for item in items]


def _expand_name(item: str, expression: str) -> list[str]:
    """Expand one name with zero or more brackets into the cross product of its ranges."""
    prefixes = [""]
    for match in re.finditer(r"([^\[\]]*)(\[([^\]]*)\])?", item):
        literal, bracket = match.group(1), match.group(3)
        prefixes = [prefix + literal for prefix in prefixes]
        if bracket is not None:
            numbers = _expand_bracket(bracket, expression)
            if len(prefixes) * len(numbers) > MAX_NODES_PER_EXPRESSION:  # before building it
                raise NodeListError(
                    f"{item!r} in {expression!r} expands to more than "
                    f"{MAX_NODES_PER_EXPRESSION} names"
                )
            prefixes = [prefix + number for prefix in prefixes for number in numbers]
    return prefixes


def _expand_bracket(bracket: str, expression: str) -> list[str]:
    """``"01-03,7"`` -> ``["01", "02", "03", "7"]``; raises NodeListError on a bad item."""
    numbers: list[str] = []
    for part in bracket.split(","):
        match = _RANGE.match(part.strip())
        if match is None:
            raise NodeListError(f"bad range {part!r} in {expression!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise NodeListError(f"range {part!r} ends below its start in {expression!r}")
        if len(numbers) + int(high) - int(low) >= MAX_NODES_PER_EXPRESSION:
            raise NodeListError(f"bracket [{bracket}] in {expression!r} is too long")
        numbers.extend(str(number).zfill(len(low)) for number in range(int(low), int(high) + 1))
    return numbers
