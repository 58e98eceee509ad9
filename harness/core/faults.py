"""The fault hooks of numprec's code, for the tests, at the steps where ``fault_point(STEP)`` is called: the last
step of a writer (harness/reports/promotion.py) or a pack of the training bench (bench/train.py).

- ``NUMPREC_KILL_AT=STEP`` makes the process kill itself there (SIGKILL, as kill -9 or a time limit would). A test
  asserts the kill fired (exit -9 or 137), then that what was left is finished or kept.
- ``NUMPREC_PAUSE_AT=STEP`` makes it stop itself there (SIGSTOP, as Ctrl-Z would), holding whatever it holds, until
  a SIGCONT: a test lays another process's steps between two of its own, in the order a race would. It stops there
  once: a step reached again (a loop's) goes on.
"""

from __future__ import annotations

import os
import signal

KILL_AT = "NUMPREC_KILL_AT"
PAUSE_AT = "NUMPREC_PAUSE_AT"
_paused: set[str] = set()


def fault_point(step: str) -> None:
    if os.environ.get(KILL_AT) == step:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(PAUSE_AT) == step and step not in _paused:
        _paused.add(step)
        os.kill(os.getpid(), signal.SIGSTOP)
