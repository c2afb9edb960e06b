"""Where the real input lives: ``../shared/data/bftrainer/`` beside the project checkout.

The data is never copied into the repository; commands default to it, tests skip with a
clear message where it is absent.
"""

import os
from pathlib import Path

TRACE_FILE = "summit-node-state-2021-02.csv.gz"
SCALABILITY_FILE = "imagenet-scalability.csv"
IMAGENET_JOBS_FILE = "jobs-imagenet-1001.csv"
SHUFFLENET_JOBS_FILE = "jobs-shufflenet-hpo-1000.csv"


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
