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


FROZEN = """
import gc, json, sys
from harness.core import startup
if sys.argv[1] == "command":
    startup.start_a_command()
import torch
from harness.backends import load_backend
from harness.models import precision_registry
backend = load_backend("hf", sys.argv[2], precision_registry()["fp32"], None, 1)
collectable = {id(thing) for thing in gc.get_objects()}
print(json.dumps({"imports": id(torch.nn.Linear) in collectable, "model": id(backend.model) in collectable}))
"""


def test_a_command_freezes_its_imports_before_its_first_model_and_a_library_import_does_not(tiny_llama):
    """In a command, the collector no longer walks what the backend's imports made (the walk at exit cost 1.2-2.6 CPU-s
    a command), while the model it loads after stays collectable; a library caller's collector is left as it is."""
    seen = {}
    for caller in ("command", "library"):
        result = subprocess.run(
            [sys.executable, "-c", FROZEN, caller, str(tiny_llama)],
            capture_output=True,
            text=True,
            env=command_env(),
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        seen[caller] = json.loads(result.stdout.splitlines()[-1])
    assert seen["command"] == {"imports": False, "model": True}
    assert seen["library"] == {"imports": True, "model": True}
