"""harness/core/startup.py: what a command's process starts with, seen from such a process; a library import (a
notebook, this test runner) keeps its own garbage collector settings."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.harness.helpers import ROOT, command_env


def test_a_command_collects_garbage_every_50000_objects_and_a_library_import_keeps_its_own():
    command = subprocess.run(
        [sys.executable, "-m", "harness.core.startup"], capture_output=True, text=True, env=command_env(), cwd=ROOT
    )
    assert command.returncode == 0 and command.stderr == "", command.stderr
    settings = json.loads(command.stdout)
    assert settings["gc_threshold"][0] == 50_000 and settings["OMP_WAIT_POLICY"] == "PASSIVE"
    library = subprocess.run(
        [sys.executable, "-c", "import gc; own = gc.get_threshold(); import harness; print(own == gc.get_threshold())"],
        capture_output=True,
        text=True,
        env=command_env(),
        cwd=ROOT,
    )
    assert (library.returncode, library.stdout) == (0, "True\n"), library.stderr
