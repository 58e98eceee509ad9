"""harness's stages are a rule the code keeps: import-linter's layers contract in pyproject.toml (commands, reports,
runs, backends, scoring | models, questions, core) holds for the tree, and breaks, naming the import, when a lower
stage imports a higher one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    """lint-imports with the contract in ``root``/pyproject.toml, over the harness package in ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_stages_import_one_way():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    """A copy of the tree where core (the lowest stage) imports from runs: the contract is broken, and the report
    names the importing module and the one it imports."""
    shutil.copytree(ROOT / "harness", tmp_path / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    errors = tmp_path / "harness" / "core" / "errors.py"
    errors.write_text(errors.read_text(encoding="utf-8") + "\nfrom harness.runs.results import CellKey  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "0 kept, 1 broken" in result.stdout
    assert "harness.core.errors -> harness.runs.results" in result.stdout
