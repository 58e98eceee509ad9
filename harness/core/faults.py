"""The one fault hook of numprec's code, for the tests: ``NUMPREC_KILL_AT=STEP`` makes the process kill itself
(SIGKILL, as kill -9 or a time limit would) where ``killed_at(STEP)`` is called: the last step of a writer
(harness/reports/promotion.py) or a pack of the training bench (bench/train.py). A test asserts the kill fired (exit
-9 or 137), then that what was left is finished or kept."""

from __future__ import annotations

import os
import signal

KILL_AT = "NUMPREC_KILL_AT"


def killed_at(step: str) -> None:
    if os.environ.get(KILL_AT) == step:
        os.kill(os.getpid(), signal.SIGKILL)
