"""Fixtures of the replay tests: the real inputs loaded once, and tiny hand-made files."""

from dataclasses import dataclass
from pathlib import Path

import pytest
from interstice.optimizer import ScalabilityTable
from interstice.replay.jobs import JobSpec, load_jobs
from interstice.replay.trace import NodeTrace, load_trace
from replay_inputs import TINY_JOBS, TINY_TABLE, TINY_TRACE

from interstice import data


@dataclass(frozen=True)
class RealInputs:
    trace: NodeTrace
    table: ScalabilityTable
    jobs: list[JobSpec]


@pytest.fixture(scope="session")
def real_inputs(bftrainer_dir: Path) -> RealInputs:
    """The Summit trace, the ImageNet table and the 1,001 ImageNet jobs, parsed once."""
    table = ScalabilityTable.from_csv((bftrainer_dir / data.SCALABILITY_FILE).read_text())
    return RealInputs(
        trace=load_trace(bftrainer_dir / data.TRACE_FILE),
        table=table,
        jobs=load_jobs(bftrainer_dir / data.IMAGENET_JOBS_FILE, table),
    )


@pytest.fixture
def inputs(tiny_files: dict[str, Path]) -> tuple[NodeTrace, ScalabilityTable]:
    """The tiny trace and table, parsed."""
    return load_trace(tiny_files["--trace"]), ScalabilityTable.from_csv(TINY_TABLE)


@pytest.fixture
def tiny_files(tmp_path: Path) -> dict[str, Path]:
    """A 4-node trace, a 2-job jobs file and a one-model table, as CLI path options."""
    files = {"--trace": "trace.csv", "--jobs": "jobs.csv", "--scalability": "table.csv"}
    texts = {"--trace": TINY_TRACE, "--jobs": TINY_JOBS, "--scalability": TINY_TABLE}
    paths = {}
    for option, name in files.items():
        paths[option] = tmp_path / name
        paths[option].write_text(texts[option])
    return paths
