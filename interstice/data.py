"""Where the real input lives: ``../shared/data/bftrainer/`` beside the project checkout.

The data is BFTrainer's public replay data (Liu et al., arXiv 2106.12091), converted from
pandas pickles to CSV without changing a value (``shared/data/README.md``). It is never copied
into the repository; commands default to it, tests skip with a clear message where it is
absent. Where the node-state trace is absent, ``interstice demo`` replays the synthetic one
the package ships instead (:data:`SYNTHETIC_TRACE`, made by :mod:`interstice.synthetic_trace`).
"""

import os
from pathlib import Path

TRACE_FILE = "summit-node-state-2021-02.csv.gz"
SCALABILITY_FILE = "imagenet-scalability.csv"
IMAGENET_JOBS_FILE = "jobs-imagenet-1001.csv"
SHUFFLENET_JOBS_FILE = "jobs-shufflenet-hpo-1000.csv"
SYNTHETIC_TRACE = Path(__file__).parent / "traces" / "synthetic-node-state.csv.gz"
"""The synthetic node-state trace shipped in the package (not measured data)."""


def data_dir() -> Path:
    """The BFTrainer data folder.

    ``$INTERSTICE_DATA_DIR`` when set; else ``../shared/data/bftrainer`` beside the checkout
    this package was installed from (editable install); else the same path relative to the
    current directory. The folder may not exist: callers say so in their own words.
    """
    if env := os.environ.get("INTERSTICE_DATA_DIR"):
        return Path(env)
    beside_checkout = Path(__file__).resolve().parents[2] / "shared" / "data" / "bftrainer"
    if beside_checkout.is_dir():
        return beside_checkout
    return Path("..") / "shared" / "data" / "bftrainer"


def demo_trace() -> Path:
    """The node-state trace ``interstice demo`` replays when given none.

    The real trace in :func:`data_dir` when it is there, or when ``$INTERSTICE_DATA_DIR``
    names the folder (a folder given and lacking it is the caller's error to report); else
    :data:`SYNTHETIC_TRACE`.
    """
    real = data_dir() / TRACE_FILE
    if real.is_file() or os.environ.get("INTERSTICE_DATA_DIR"):
        return real
    return SYNTHETIC_TRACE
