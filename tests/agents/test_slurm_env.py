"""Slurm node-list parsing and the environment mapping: pure, no Slurm needed (one
cross-check against ``scontrol show hostnames`` where Slurm is installed)."""

import random
import shutil
import subprocess
import tracemalloc
from pathlib import Path

import pytest
from interstice.agents.slurm.env import (
    SLURM_ENV,
    NodeListError,
    SlurmEnvError,
    SlurmJobEnv,
    parse_node_list,
    read_env,
    read_job_env,
)


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("a01n[01-03],b02n05", ["a01n01", "a01n02", "a01n03", "b02n05"]),
        ("vm", ["vm"]),
        ("", []),
        ("  node7  ", ["node7"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[1,3-4,9]", ["n1", "n3", "n4", "n9"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("[1-2]x", ["1x", "2x"]),
        ("a[7],b", ["a7", "b"]),
    ],
)
def test_parse_node_list(expression: str, names: list[str]) -> None:
    assert parse_node_list(expression) == names


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("a[]", "bad range ''"),
        ("a[1-", "unclosed '['"),
        ("a1]", "unmatched ']' at position 2"),
        ("a[[1]]", "nested '['"),
        ("a,,b", "empty node name"),
        ("a,", "empty node name"),
        ("a[3-1]", "range '3-1' ends below its start"),
        ("a[x]", "bad range 'x'"),
        ("a[1-2-3]", "bad range '1-2-3'"),
        ("a[1-" + "9" * 5000 + "]", "bad range"),
        ("a[0-99999999]", "too long"),
    ],
)
def test_parse_node_list_rejects(expression: str, message: str) -> None:
    with pytest.raises(NodeListError, match=message.replace("[", r"\[")):
        parse_node_list(expression)


@pytest.mark.parametrize(
    "expression",
    ["r[1-999999]n[1-999999]", "a[1-600000],b[1-600000]", "n[1-99999999999999999]"],
)
def test_the_whole_expansion_is_bounded_before_any_name_is_built(expression: str) -> None:
    """Each bracket or name within the bound, their product or sum past it: refused having
    built nothing (a bound checked after expanding holds a million names first)."""
    tracemalloc.start()
    try:
        with pytest.raises(NodeListError, match="is too long: it expands to"):
            parse_node_list(expression)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100_000


def test_a_long_expression_is_quoted_cut() -> None:
    with pytest.raises(NodeListError) as raised:
        parse_node_list("n" * 100_000 + "[x]")
    assert len(str(raised.value)) < 400 and "(100003 characters)" in str(raised.value)


def test_node_list_error_is_a_value_error() -> None:
    assert issubclass(NodeListError, ValueError)


def test_parse_node_list_matches_scontrol(tmp_path: Path) -> None:
    """Random expressions expand exactly as Slurm's own hostlist code expands them."""
    if shutil.which("scontrol") is None:
        pytest.skip("scontrol absent: Slurm is not installed (apt-get install slurm-wlm)")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=check\nSlurmctldHost=localhost\n")
    rng = random.Random(6)
    for _ in range(20):
        parts = []
        for _ in range(rng.randint(1, 3)):
            low = rng.randint(0, 20)
            width = rng.choice([1, 2, 3])
            high = low + rng.randint(0, 4)
            prefix = rng.choice(["a", "node", "r1n", "gpu-"])
            parts.append(f"{prefix}[{low:0{width}d}-{high:0{width}d},{high + 2:0{width}d}]")
        expression = ",".join(parts)
        result = subprocess.run(
            ["scontrol", "show", "hostnames", expression],
            env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        # scontrol merges duplicate names across items; the random prefixes rarely repeat.
        expected = result.stdout.split()
        assert sorted(set(parse_node_list(expression))) == sorted(expected), expression


def test_read_job_env() -> None:
    environ = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "a01n02", "SLURM_JOB_PARTITION": "scav"}
    assert read_job_env(environ) == SlurmJobEnv(job_id="42", node="a01n02", partition="scav")
    assert read_job_env({"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n"}).partition == ""


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"SLURMD_NODENAME": "n"}, "SLURM_JOB_ID is unset or empty"),
        ({"SLURM_JOB_ID": " ", "SLURMD_NODENAME": "n"}, "SLURM_JOB_ID is unset or empty"),
        ({"SLURM_JOB_ID": "12_3", "SLURMD_NODENAME": "n"}, "is not a job number"),
        ({"SLURM_JOB_ID": "1"}, "SLURMD_NODENAME is unset or empty"),
    ],
)
def test_read_job_env_rejects(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SlurmEnvError, match=message):
        read_job_env(environ)


def test_every_variable_is_read_through_the_mapping() -> None:
    environ = {variable: f"value-of-{name}" for name, variable in SLURM_ENV.items()}
    for name in SLURM_ENV:
        assert read_env(environ, name) == f"value-of-{name}"
    assert all(variable.startswith(("SLURM_", "SLURMD_")) for variable in SLURM_ENV.values())
    with pytest.raises(KeyError):
        read_env(environ, "not_a_field")
