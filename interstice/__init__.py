"""interstice: fill a supercomputer's transient idle nodes with elastic deep-learning training.

The distribution's top-level folders are imported as sub-packages through setuptools
``package-dir``: ``optimizer/`` is :mod:`interstice.optimizer`, ``replay/`` is
:mod:`interstice.replay`, ``api/`` is :mod:`interstice.api`, ``models/`` is
:mod:`interstice.models` and ``agents/`` is :mod:`interstice.agents`.
"""

__version__ = "0.1.0"
