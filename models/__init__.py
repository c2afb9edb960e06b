"""Training side of interstice: the models of the scalability table and how they are trained.

``build_trainer`` applies data parallelism, Structured Partial Backpropagation
(``interstice.models.spb``) or SplitBrain hybrid parallelism (``interstice.models.splitbrain``)
to a model of ``interstice.models.zoo``; ``interstice profile`` (``interstice.models.cli``)
measures them.

The exports are loaded on first use (PEP 562), so that ``interstice.cli`` can import
``interstice.models.cli`` without importing torch (an optional extra, ``.[train]``).
"""

from typing import Any

__all__ = ["MODEL_NAMES", "Trainer", "build_trainer"]


def __getattr__(name: str) -> Any:
    if name == "MODEL_NAMES":
        from interstice.models.zoo import MODEL_NAMES

        return MODEL_NAMES
    if name in ("Trainer", "build_trainer"):
        from interstice.models import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'interstice.models' has no attribute {name!r}")
