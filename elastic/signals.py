"""The preemption signals a training process turns into a stop after the current step."""

import logging
import signal
import threading
from types import FrameType

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Records SIGTERM/SIGINT instead of dying, so the step in flight can end and be saved.

    The first signal only sets :attr:`received`. A repeated SIGTERM changes nothing: one
    preemption often arrives twice (GNU ``timeout``, Slurm and process managers signal the
    whole process group, and ``torchrun`` sends its workers SIGTERM again when a second
    signal interrupts its own shutdown), and dying then would lose the checkpoint being
    saved; whoever sends it kills with SIGKILL once its grace period is over. A second
    SIGINT after a first signal restores the previous handler and re-delivers itself: a
    second Ctrl-C ends the process at once (e.g. when it hangs in a collective whose peer
    died). Handlers can only be installed from the main thread; elsewhere this logs a
    warning and records nothing.

    Example:
        >>> import os, signal
        >>> from interstice.elastic.signals import StopSignals
        >>> signals = StopSignals()
        >>> os.kill(os.getpid(), signal.SIGTERM)
        >>> signals.received
        True
        >>> signals.restore()
    """

    def __init__(self) -> None:
        self.received = False
        self._previous: dict[int, object] = {}
        if threading.current_thread() is not threading.main_thread():
            logger.warning("not the main thread: SIGTERM/SIGINT will not stop training cleanly")
            return
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received and signum == signal.SIGINT:
            self.restore()
            signal.raise_signal(signum)
            return
        self.received = True

    def restore(self) -> None:
        """Put back the handlers found at construction."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}
