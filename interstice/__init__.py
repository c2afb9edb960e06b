"""interstice: fill a supercomputer's transient idle nodes with elastic deep-learning training.

The distribution's top-level folders are imported as sub-packages through setuptools
``package-dir``: ``optimizer/`` is :mod:`interstice.optimizer` (the allocation engine),
``replay/`` is :mod:`interstice.replay` (trace replay), ``api/`` is :mod:`interstice.api`
(the service), ``elastic/`` is :mod:`interstice.elastic` (users' training scripts),
``agents/`` is :mod:`interstice.agents` (node agents), ``models/`` is
:mod:`interstice.models` (parallelism and the model zoo) and ``examples/`` is
:mod:`interstice.examples`. This folder holds the ``interstice`` command (:mod:`.cli`,
assembling each package's commands), the user CLI (:mod:`.client_cli`), ``interstice
solve`` (:mod:`.solve_cli`), ``interstice demo`` (:mod:`.demo`), and the shared modules
that the packages import.

Imports: each package's rule is in its own docstring, and all are checked by
tests/test_import_rules.py. The shared modules import the standard library only (the CLI's
interstice.errors also typer): interstice.wire (the wire facts the service, the agents and
``elastic`` share), interstice.files (atomic writes), interstice.ports (free ports),
interstice.data (the real data's folder) and interstice.errors (the CLIs' errors). The CLI
and the demo assemble every package and have no rule.
"""

__version__ = "0.1.0"
