"""The runnable examples in interstice.elastic's docstrings run and give what they show."""

import doctest
import importlib
import signal

import pytest

from interstice import elastic

MODULES = ["batch", "env", "final", "records", "report", "sampler", "sharded", "signals", "state"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(importlib.import_module("interstice.elastic.report"), "_reporter", None)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    elastic.shutdown()
    try:
        module = importlib.import_module(f"interstice.elastic.{name}")
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0
        assert result.attempted > 0
    finally:
        elastic.shutdown()
        elastic.env.use_checkpoint_dir(None)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
