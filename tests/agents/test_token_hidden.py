"""The agent's token does not reach code running under the agent's Unix account.

User code runs as the agent's account (docs/user-guide/trust-model.md), so removing the token from
``os.environ`` is not enough: ``/proc/<agent pid>/environ`` still holds the environment the
agent was started with. The agent makes itself non-dumpable, after which a process of the
same user may read that file only with CAP_SYS_PTRACE (Linux ``ptrace_may_access``).
"""

import subprocess
import sys

PR_GET_DUMPABLE = 3  # linux/prctl.h


def dumpable_after(code: str) -> list[str]:
    """PR_GET_DUMPABLE before and after ``code`` in a fresh interpreter."""
    probe = (
        "import ctypes\n"
        f"libc = ctypes.CDLL(None)\nbefore = libc.prctl({PR_GET_DUMPABLE}, 0, 0, 0, 0)\n"
        f"{code}\n"
        f"print(before, libc.prctl({PR_GET_DUMPABLE}, 0, 0, 0, 0))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_hiding_makes_the_process_non_dumpable() -> None:
    hide = "from interstice.agents.cli import hide_from_same_user\nhide_from_same_user()"
    assert dumpable_after(hide) == ["1", "0"]


def test_the_agent_hides_itself_when_it_reads_its_token() -> None:
    read = (
        "import os\nfrom interstice.agents.cli import _read_token\n"
        "os.environ['INTERSTICE_AGENT_TOKEN'] = 'secret'\n"
        "assert _read_token('secret', None) == 'secret'\n"
        "assert 'INTERSTICE_AGENT_TOKEN' not in os.environ"
    )
    assert dumpable_after(read) == ["1", "0"]
