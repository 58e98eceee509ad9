"""What every numprec command sets before anything heavy is imported (each package's __init__ imports this).

- Other libraries' warnings, banners and log lines are silenced at their source unless --verbose or
  NUMPREC_VERBOSE=1 asks for them (harness/core/quiet.py).
- OpenMP threads wait passively: spinning threads cost 2.5-6x on these shared 2-core machines
  (shared/notes/platform-facts.md, "Threads"); tokenizers do not fork thread pools.
- torch.compile's caches (inductor's graphs, Triton's kernels) live under numprec's cache (~/.cache/numprec or
  NUMPREC_CACHE), so a second process reuses what the first compiled.
- Ctrl-C while the command is still importing torch and transformers (seconds, before any file is written) ends it
  with one line and exit status 130, not a KeyboardInterrupt traceback; ``harness.core.cli.run`` puts Python's own
  handler back once the command's main() starts, which then turns Ctrl-C into the same line after cleaning up.
"""

import os
import signal
import sys
import threading

from harness.core.quiet import silence_libraries

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Compiled graphs and kernels kept beside numprec's other caches, so that a second process finds what the first
# compiled (inductor's FX graph cache and Triton's kernels; harness/backends/hf.py announces a first compile)
_CACHE = os.environ.get("NUMPREC_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "numprec"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_CACHE, "triton"))
silence_libraries()


def _interrupted_while_starting(signum, frame) -> None:
    sys.stderr.write("interrupted while starting: nothing was written\n")
    sys.stderr.flush()
    os._exit(130)


def _starting_a_command() -> bool:
    """``python -m harness.eval`` (and the other commands) while Python is still importing the module: sys.argv[0]
    is "-m" until the module runs. Not a library import (pytest, a notebook), whose Ctrl-C stays its own."""
    return sys.argv[:1] == ["-m"] and threading.current_thread() is threading.main_thread()


if _starting_a_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
