"""A bad ``nproc_per_node`` is told in words, in the service's 422 and in the CLI's one line:
what it may be ('auto' or an integer from 1 to 1024), not the names of pydantic's inner
validators (``function-before[_not_a_boolean(), constrained-int]``)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from cli_helpers import Cli

WORDS = "nproc_per_node: Input should be 'auto' or an integer from 1 to 1024"


@pytest.mark.parametrize("value", ["0", "1025", "many", "1.5"])
def test_the_cli_says_what_nproc_per_node_may_be(cli: Cli, value: str) -> None:
    result = cli("submit", "--command", "train.py", "--nodes", "1", "--total-samples", "100",
                 "--nproc-per-node", value)  # fmt: skip
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith(WORDS), line
    assert "Traceback" not in result.output


def test_a_job_file_gets_the_same_line(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('command = ["train.py"]\nmin_nodes = 1\nmax_nodes = 1\n'
                    "total_samples = 100\nnproc_per_node = 0\n")  # fmt: skip
    result = cli("submit", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: {path}: {WORDS}"


@pytest.mark.parametrize("value", [0, 1025, "many", 1.5, None])
def test_the_service_says_what_nproc_per_node_may_be(cli: Cli, value: object) -> None:
    """The 422 holds one error naming the field, in words (the CLI's own check sent aside)."""
    body = {"command": ["train.py"], "min_nodes": 1, "max_nodes": 1, "total_samples": 100,
            "workdir": "/tmp", "nproc_per_node": value}  # fmt: skip
    headers = {"Authorization": f"Bearer {cli.service.tokens['user']}"}
    r = httpx.post(f"{cli.service.url}/v1/jobs", json=body, headers=headers, timeout=30)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "nproc_per_node"]
    assert error["msg"] == WORDS.removeprefix("nproc_per_node: ")
