"""Trace replay: the optimizer driven through simulated time over a real node-state trace.

``interstice replay`` (:mod:`.cli`) loads the node-state trace (:mod:`.trace`), the jobs file
(:mod:`.jobs`) and the scalability table, replays the jobs on a window of the trace under a
policy and two baselines (:mod:`.simulator`, with the horizon of :mod:`.horizon` and, with
``--forecast``, the idle-hole forecasts of :mod:`.forecast`), and writes ``report.json``,
``report.png`` and ``summary.png`` (:mod:`.report`), with what the trace offers before any
job runs: idle node-hours per day and hole lengths (:mod:`.idle`). :mod:`.slurm_trace`
builds a trace from a centre's own Slurm records (``interstice trace from-slurm``).

Imports: interstice.optimizer and the shared interstice.data and interstice.errors (the
CLI's); never torch, the web stack, a database or an HTTP client (tests/test_import_rules.py).
"""
