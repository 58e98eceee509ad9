"""Layer groups (harness/recipes/groups.py): vLLM's fused units, and a model whose blocks are not Llama-like refused in
one line before any scoring."""

import pytest
import torch

from harness.core.errors import UserError
from harness.recipes import groups


def test_a_model_without_decoder_blocks_is_refused():
    with pytest.raises(UserError, match="Sequential has no model.layers of decoder blocks"):
        groups.module_groups(torch.nn.Sequential(torch.nn.Linear(2, 2)))


@pytest.mark.parametrize("granularity", groups.GRANULARITIES)
def test_a_block_missing_a_projection_is_refused_naming_it(granularity):
    model = groups._toy(3)
    del model.model.layers[2].mlp.gate_proj
    with pytest.raises(UserError, match="block 2 of Module has no linear mlp.gate_proj .for the gate_up group."):
        groups.groups_of(model, granularity)


def test_a_projection_that_is_not_linear_is_refused():
    model = groups._toy(2)
    model.model.layers[0].self_attn.v_proj = torch.nn.Identity()
    with pytest.raises(UserError, match="block 0 of Module has no linear self_attn.v_proj"):
        groups.module_groups(model)
