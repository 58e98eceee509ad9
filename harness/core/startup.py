"""What every numprec command sets before anything heavy is imported (each package's __init__ imports this).

- Other libraries' warnings, banners and log lines are silenced at their source unless --verbose or
  NUMPREC_VERBOSE=1 asks for them (harness/core/quiet.py).
- OpenMP threads wait passively: spinning threads cost 2.5-6x on these shared 2-core machines
  (shared/notes/platform-facts.md, "Threads"); tokenizers do not fork thread pools.
- torch.compile's caches (inductor's graphs, Triton's kernels) live under numprec's cache (~/.cache/numprec or
  NUMPREC_CACHE), so a second process reuses what the first compiled.
- The garbage collector runs every 50,000 new objects instead of every 700: a command imports torch, transformers and
  their kind, hundreds of thousands of objects that live as long as the process, and collecting while they are made
  frees nothing (a small evaluation spent 1.0-1.2 s of its 6.8 s in eight full collections; at 50,000, 0.3 s and
  the same peak memory, measured here).
- ``python -m harness.core.startup`` prints, as JSON, the settings a command starts with.
- Ctrl-C while the command is still importing torch and transformers (seconds, before any file is written) ends it
  with one line and exit status 130, not a KeyboardInterrupt traceback; ``harness.core.cli.run`` puts Python's own
  handler back once the command's main() starts, which then turns Ctrl-C into the same line after cleaning up.
"""

import gc
import json
import os
import signal
import sys
import threading

from harness.core.paths import cache_root
from harness.core.quiet import silence_libraries

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Compiled graphs and kernels kept beside numprec's other caches, so that a second process finds what the first
# compiled (inductor's FX graph cache and Triton's kernels; harness/backends/hf.py announces a first compile)
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", str(cache_root() / "triton"))
silence_libraries()


def _interrupted_while_starting(signum, frame) -> None:
    sys.stderr.write("interrupted while starting: nothing was written\n")
    sys.stderr.flush()
    os._exit(130)


def _starting_a_command() -> bool:
    """``python -m harness.eval`` (and the other commands) while Python is still importing the module: sys.argv[0]
    is "-m" until the module runs. Not a library import (pytest, a notebook), whose Ctrl-C stays its own."""
    return sys.argv[:1] == ["-m"] and threading.current_thread() is threading.main_thread()


_collector = {"command": False, "frozen": False}  # whether this process runs a command; whether it froze its imports


def start_a_command() -> None:
    """What a command's process sets as it starts (above); a process that only imports numprec (a notebook, a test
    runner) keeps its own. tests/warm.py calls it in each command it forks, as the command's import would."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    gc.set_threshold(50_000, *gc.get_threshold()[1:])
    _collector["command"] = True


def freeze_imports() -> None:
    """In a command, once, where its backend's imports are done and no model is loaded yet: the objects made so far
    (torch's, transformers' and their kind's: 420,000 after harness.eval's hf backend) move to the collector's permanent
    generation. The collections after it, and the ones at exit among them, walk what the command makes from then on: at
    exit otherwise every command walked them again, 1.2-2.6 CPU-s of the 5.7-7.6 that importing harness.eval's hf
    backend and exiting cost (five pairs of runs here). What a frozen object cannot have is a collection: garbage cycles
    the imports left stay until the exit; the command's own objects, its models among them, are collected as before. A
    process that is no command (a notebook, a test runner) keeps its collector as it is."""
    if _collector["command"] and not _collector["frozen"]:
        gc.freeze()
        _collector["frozen"] = True


if _starting_a_command():
    start_a_command()


if __name__ == "__main__":  # the settings a command starts with (this module ran first as harness's, as a command's)
    names = ("OMP_WAIT_POLICY", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
    settings = {name: os.environ.get(name) for name in names}
    print(json.dumps({**settings, "gc_threshold": list(gc.get_threshold())}))
