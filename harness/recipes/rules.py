"""The rules a practitioner tries before any search: one line each, a set of groups kept at the higher precision.

- by kind: every q/k/v (``every qkv``), every o_proj, every gate/up, every down_proj; all of ``attention`` (q/k/v and
  o) and all of the ``mlp`` (gate/up and down);
- by depth: the first k blocks, the last k, the first and last k (llm-compressor's common advice keeps the edges),
  for k = 1, 2, 4, ... up to a quarter of the blocks;
- ``lm_head`` where the target quantizes it.

A rule is a candidate of the search beside the per-block groups (harness/recipes/greedy.py), and the search's recipe
is compared with the best rule at equal bits, on the search's problems and, confirmed, on fresh ones.

>>> from harness.recipes.groups import _toy, module_groups, block_groups
>>> found = rules(module_groups(_toy(8)))
>>> list(found)[:6]
['every qkv', 'every o', 'every gate_up', 'every down', 'attention', 'mlp']
>>> found["attention"][:3], found["first and last 2 blocks"][-1]
(['block 0 qkv', 'block 0 o', 'block 1 qkv'], 'block 7 down')
>>> list(rules(block_groups(_toy(8))))[3:]
['first 2 blocks', 'last 2 blocks', 'first and last 2 blocks']
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.recipes.groups import KINDS, Group

PARTS = {"attention": ("qkv", "o"), "mlp": ("gate_up", "down")}


def rules(groups: Sequence[Group]) -> dict[str, list[str]]:
    """Each rule's name and the names of the groups it keeps, in the groups' order."""
    blocks = sorted({group.block for group in groups if group.block is not None})
    found: dict[str, list[str]] = {}
    if any(group.kind in KINDS for group in groups):
        for kind in KINDS:
            found[f"every {kind}"] = [group.name for group in groups if group.kind == kind]
        for part, kinds in PARTS.items():
            found[part] = [group.name for group in groups if group.kind in kinds]
    depth = 1
    while depth <= max(1, len(blocks) // 4):
        first, last = set(blocks[:depth]), set(blocks[-depth:])
        plural = "block" if depth == 1 else "blocks"
        for name, wanted in (("first", first), ("last", last), ("first and last", first | last)):
            found[f"{name} {depth} {plural}"] = [group.name for group in groups if group.block in wanted]
        depth *= 2
    if any(group.kind == "lm_head" for group in groups):
        found["lm_head"] = ["lm_head"]
    return found
