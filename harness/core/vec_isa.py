"""inductor's check of this CPU's vector instruction sets, remembered across processes.

Before a process's first CPU compile, inductor checks which vector instruction sets it can use (AVX2, AVX-512 and
its bf16 and VNNI extensions; `Note [Checking for Vectorized Support in Inductor]` in torch/_inductor/cpu_vec_isa.py):
for each it builds a small library against torch's vector headers (kept in its on-disk cache) and starts a Python
process that loads it, to be sure the library finds the symbols this torch exports. On 2 cores that is six processes
and about 1 s of every compiling process (measured: an NVFP4 activation quantizer's first call took 2.67 s, 1.45 s
once the check had been done).

``remember()`` keeps a load that worked as an empty file in numprec's cache, named by what decides it: the library
(its path, which inductor derives from its source and flags, its size and time), this interpreter, torch's version
and where it lives, the machine's name and its CPU's flags. A later process given the same answers takes it without
starting the process; anything changed (another torch, another node of a cluster sharing the cache, a rebuilt
library) is checked again. A load that failed is never remembered.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

from harness.core.paths import cache_root

probes_started = 0  # loads checked by a process of their own in this process (the others were remembered)
_installed = False


def cpu_flags() -> str:
    """The CPU's flags line (/proc/cpuinfo), what decides which vector instructions compiled code may use."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            return next((line for line in cpuinfo if line.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor()


def _marker(library: str) -> Path:
    import torch

    built = os.stat(library)
    facts = [
        library,
        str(built.st_size),
        str(built.st_mtime_ns),
        sys.executable,
        torch.__version__,
        os.path.dirname(torch.__file__),
        platform.node(),
        cpu_flags(),
    ]
    return cache_root() / "vec-isa" / hashlib.sha256("\n".join(facts).encode()).hexdigest()


def _remembered(probe: Callable[[object, str], bool]) -> Callable[[object, str], bool]:
    def probe_load(self, output_path: str) -> bool:
        global probes_started
        try:
            marker = _marker(output_path)
        except OSError:  # no library where inductor says it built one: its own check says what happens
            return probe(self, output_path)
        if marker.is_file():
            return True
        probes_started += 1
        loaded = probe(self, output_path)
        if loaded:
            try:
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
            except OSError:  # a read-only cache: checked again next time, as inductor would
                pass
        return loaded

    return probe_load


def remember() -> None:
    """Route inductor's load check through the remembered answers (idempotent). A torch without the check as this
    module knows it keeps its own."""
    global _installed
    if _installed:
        return
    _installed = True
    from torch._inductor import cpu_vec_isa

    probe = getattr(cpu_vec_isa.VecISA, "_probe_load", None)
    if callable(probe):
        cpu_vec_isa.VecISA._probe_load = _remembered(probe)
