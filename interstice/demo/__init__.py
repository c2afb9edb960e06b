"""``interstice demo``: the service, real local agents, a scheduler stand-in replaying the
real Summit node-state trace, simulated agents and the example jobs, in one command.

Modules: :mod:`.plan` (which trace window and nodes), :mod:`.scheduler` (posting the node
events), :mod:`.virtual` (simulated agents), :mod:`.summary` (live view and final summary),
:mod:`.session` (one run, start to end), :mod:`.cli` (the command).
"""
