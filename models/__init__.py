"""Training side of interstice: the models of the scalability table and how they are trained.

``build_trainer`` (``interstice.models.parallelize``) applies one ``Layout`` to a model of
``interstice.models.zoo``: data parallelism (``data_parallel``), Structured Partial
Backpropagation (``spb``) or SplitBrain hybrid parallelism (``splitbrain``);
``interstice profile`` (``interstice.models.cli``) measures them.

The exports are loaded on first use (PEP 562), so that ``interstice.cli`` can import
``interstice.models.cli`` without importing torch (an optional extra, ``.[train]``).
``tinycnn`` needs torch alone; the ImageNet models need torchvision (``.[vision]``).

Imports: torch, torchvision and the shared interstice.wire, interstice.errors and
interstice.ports; never the web stack, a database or an HTTP client
(tests/test_import_rules.py).
"""

from typing import Any

__all__ = ["MODEL_NAMES", "DataParallelTrainer", "Layout", "build_trainer"]


def __getattr__(name: str) -> Any:
    if name == "MODEL_NAMES":
        from interstice.models.zoo import MODEL_NAMES

        return MODEL_NAMES
    if name == "DataParallelTrainer":
        from interstice.models.data_parallel import DataParallelTrainer

        return DataParallelTrainer
    if name in ("Layout", "build_trainer"):
        from interstice.models.parallelize import Layout, build_trainer

        return {"Layout": Layout, "build_trainer": build_trainer}[name]
    raise AttributeError(f"module 'interstice.models' has no attribute {name!r}")
