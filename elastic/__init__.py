"""interstice.elastic: users' own training scripts, elastic and exactly-once.

A handful of calls around a plain PyTorch loop; the same script runs under ``torchrun``
alone or as an interstice job (whose agent adds the ``INTERSTICE_*`` environment and the stop
requests). See ``examples/train_digits.py`` for a whole script.

- :func:`init`: process group, rank, world size, device, the job's folders.
- :class:`ElasticSampler`: one seeded order per epoch whatever the world size; resumable.
- :func:`accumulate`, :func:`plan`, :func:`shares`: a fixed global batch at any world size.
- :class:`State`: checkpoint/resume at any world size, agreed stop, periodic saves.
- :func:`report`: progress for the agent and the job's ``metrics.jsonl``.
- :func:`save_final`: the trained model in ``<job_dir>/final/model.pt``.
- :class:`SampleRecorder`: ``--record-samples``, each trained ``epoch index``, for checks.

For a framework's own loop, the same contract as one callback, imported by name (extras
``lightning`` and ``hf``): :mod:`interstice.elastic.lightning` (``Trainer.fit``),
:mod:`interstice.elastic.hf` (``transformers.Trainer``) and
:mod:`interstice.elastic.accelerate` (a plain Accelerate loop).

Imports: torch, the standard library and the shared interstice.wire (the environment's names)
and interstice.files (atomic writes), nothing else (tests/test_import_rules.py): a user's
script needs no service, no agent and no web stack; only the framework modules import their
framework.
"""

from interstice.elastic import env
from interstice.elastic.batch import (
    Plan,
    accumulate,
    all_reduce_gradients,
    micro_batch_sizes,
    plan,
    shares,
)
from interstice.elastic.env import Context, current, init, shutdown
from interstice.elastic.final import save_final
from interstice.elastic.records import SampleRecorder
from interstice.elastic.report import report
from interstice.elastic.sampler import ElasticSampler
from interstice.elastic.state import State, is_sharded, unwrap

__all__ = [
    "Context",
    "ElasticSampler",
    "Plan",
    "SampleRecorder",
    "State",
    "accumulate",
    "all_reduce_gradients",
    "current",
    "env",
    "init",
    "is_sharded",
    "micro_batch_sizes",
    "plan",
    "report",
    "save_final",
    "shares",
    "shutdown",
    "unwrap",
]
