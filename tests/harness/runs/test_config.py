"""Configs are validated on load; every shipped config loads and describes the grid it claims."""

import pytest

from harness.core.errors import UserError
from harness.runs.config import build_spec, load_config


def spec_of(name, **overrides):
    config_name, config = load_config(name)
    return build_spec(config_name, config, **overrides)


def test_paper_grid_is_the_papers():
    """§6: add n 1-13; iter_add 3 numbers n 1-9, 5 numbers n 1-5; mul n 1-5; 1k samples; paper sampling."""
    spec = spec_of("paper")
    grid = {task.label: lengths for task, lengths in spec.grid}
    assert grid == {
        "add": list(range(1, 14)),
        "iter_add:3": list(range(1, 10)),
        "iter_add:5": list(range(1, 6)),
        "mul": list(range(1, 6)),
    }
    assert (spec.samples, spec.base, spec.decoding) == (1000, 10, "paper")


def test_flags_override_the_config():
    spec = spec_of("quick", tasks=["mul:trunc=2", "iter_add:4"], lengths=[2, 3], samples=7, seed=3)
    assert [(t.label, lengths) for t, lengths in spec.grid] == [("mul:trunc=2", [2, 3]), ("iter_add:4", [2, 3])]
    assert (spec.samples, spec.seed) == (7, 3)


def test_task_without_lengths_needs_lengths():
    with pytest.raises(UserError, match="--lengths"):
        spec_of("quick", tasks=["iter_add:7"])
