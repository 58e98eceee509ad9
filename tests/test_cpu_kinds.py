"""The tests whose expectation depends on the CPU's kernels say so: each lists the CPU kinds it was reasoned for
(``@pytest.mark.cpu_kinds``, tests/conftest.py), the suite's header names the kind it runs on, and a marked test
fails at once on a kind it does not list."""

from __future__ import annotations

import inspect

import pytest

from harness.core.machine import CPU_KINDS, cpu_kind

# What a test calls when it expects one thing on one kind of CPU and another elsewhere.
READS_THE_CPU = ("cpu_bf16_instructions(", "cpu_flags(", "cpu_kind(")


def test_the_kinds_are_told_apart_by_the_flags_that_pick_the_kernels():
    """The kinds CI has run on, by the flags /proc/cpuinfo gave there (machine.CPU_FLAGS' subset)."""
    zen3 = ["avx2", "fma", "f16c"]
    epyc = [*zen3, "avx512f", "avx512bw", "avx512vl", "avx512_vnni"]
    genoa = [*epyc, "avx512_bf16"]
    sapphire_rapids = [*genoa, "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"]
    assert [cpu_kind(flags) for flags in (zen3, epyc, genoa, sapphire_rapids, ["asimd"])] == list(CPU_KINDS)


def test_the_cpu_dependent_tests_list_the_kinds_they_were_reasoned_for(request):
    """Every collected test that reads the CPU's flags carries the marker, every marker names known kinds, and
    this machine's kind is among those each lists (else that test fails at its setup, naming the kind)."""
    here = cpu_kind()
    marked, unmarked = {}, []
    for item in request.session.items:
        marker = item.get_closest_marker("cpu_kinds")
        if marker is not None:
            marked[item.nodeid] = marker.args
        elif (
            isinstance(item, pytest.Function)
            and item.module.__name__ != __name__  # this module's read the flags they are given, or list every test
            and any(call in inspect.getsource(item.function) for call in READS_THE_CPU)
        ):
            unmarked.append(item.nodeid)
    assert not unmarked, f"these read the CPU's flags without @pytest.mark.cpu_kinds: {unmarked}"
    assert all(kinds and set(kinds) <= set(CPU_KINDS) for kinds in marked.values()), marked
    assert [nodeid for nodeid, kinds in marked.items() if here not in kinds] == [], f"not reasoned for {here}"
    print(f"CPU kind {here}: {len(marked)} tests reasoned for it")
