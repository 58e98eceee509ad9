"""harness/core/vec_isa.py: inductor's load check of its vector-instruction library runs a process once; a second
check of the same library on the same machine takes the remembered answer, anything changed checks again, and a
library that does not load is never remembered."""

from __future__ import annotations

import pytest
from torch._inductor import cpu_vec_isa

from harness.core import vec_isa


@pytest.fixture
def isa(tmp_path, monkeypatch):
    """The instruction set inductor picks here (its check remembered in the machine's cache, as a compile would),
    then checked again with an empty cache."""
    vec_isa.remember()
    chosen = cpu_vec_isa.pick_vec_isa()
    if not chosen:
        pytest.skip("inductor finds no vector instruction set on this CPU: nothing to check")
    monkeypatch.setenv("NUMPREC_CACHE", str(tmp_path))
    return chosen


def markers(tmp_path) -> list:
    folder = tmp_path / "vec-isa"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_a_load_that_worked_is_checked_once(isa, tmp_path, monkeypatch):
    started = vec_isa.probes_started
    assert isa.check_build(cpu_vec_isa.VecISA._avx_code)  # builds (or finds) the library, then loads it in a process
    assert vec_isa.probes_started == started + 1
    assert len(markers(tmp_path)) == 1
    assert isa.check_build(cpu_vec_isa.VecISA._avx_code)
    assert vec_isa.probes_started == started + 1  # remembered: no process
    monkeypatch.setattr(vec_isa.platform, "node", lambda: "another-node-sharing-this-cache")
    assert isa.check_build(cpu_vec_isa.VecISA._avx_code)
    assert vec_isa.probes_started == started + 2  # another machine checks for itself
    assert len(markers(tmp_path)) == 2


def test_a_library_that_does_not_load_is_not_remembered(isa, tmp_path):
    broken = tmp_path / "not-a-library.so"
    broken.write_bytes(b"not an ELF file")
    started = vec_isa.probes_started
    assert not isa._probe_load(str(broken))
    assert not isa._probe_load(str(broken))
    assert vec_isa.probes_started == started + 2
    assert markers(tmp_path) == []
