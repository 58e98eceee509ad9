"""What a test needs that a fresh machine may lack (a Slurm cluster, Open MPI): README's test command passes on a
machine without them, and CI, which installs them, says it must run their tests."""

import os

import pytest


def require(present: bool, variable: str, missing: str, how: str) -> None:
    """A test that needs something a fresh machine lacks (Slurm, MPI): it skips with one line saying how to get it,
    unless ``variable`` is 1 (CI sets it), where its absence is a failure: CI must keep running such tests."""
    if present:
        return
    if os.environ.get(variable) == "1":
        pytest.fail(f"{variable}=1 but {missing}")
    pytest.skip(f"{missing}: {how} (CI sets {variable}=1 and runs it)")
