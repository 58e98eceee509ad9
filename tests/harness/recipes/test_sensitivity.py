"""harness.sensitivity on real checkpoints: the small Llama's NVFP4 and FP8 checkpoints made by harness.quantize
(shared with the formats' tests, on their worker), placed where harness.eval finds a model's checkpoints, with the
real tokenizer and the calibration stream's problems. The mixer computes each uniform model exactly and a mix as
neither; the command writes its table, resumes a killed one without rescoring what it holds, and refuses bad input
in one line."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from harness.backends.hf import HFBackend
from harness.core.files import csv_line
from harness.models import get_model, precision_registry
from harness.models.recipe_files import read_recipe
from harness.models.weights import cache_root, quantized_dir
from harness.questions.problems import HELD_OUT_COUNT, generate, heldout_problems, parse_task
from harness.recipes.bits import mean_bits, precision_bits
from harness.recipes.groups import KINDS, Group, module_groups
from harness.recipes.mix_scores import MixScores, read_store
from harness.recipes.mixer import Mixer
from harness.recipes.rules import rules
from harness.recipes.table import COLUMNS, cell_rows, fill_table, jobs
from harness.recipes.teacher import score, teacher_batch
from tests.console import without_bars
from tests.harness.commands import command, refused
from tests.harness.helpers import ROOT, assert_user_error, command_env, needs_quantize_env, run_module

pytestmark = [needs_quantize_env, pytest.mark.xdist_group("formats"), pytest.mark.slow]

PAIR = ("nvfp4", "fp8-dynamic")


@pytest.fixture(scope="module")
def cache(checkpoints, tmp_path_factory):
    """A numprec cache where smollm2-arith's nvfp4 and fp8-dynamic checkpoints are the small Llama's, and its models
    (the embedded model converted, the fine-tuned one merged, each once in the session's cache) are the session's:
    converting again here would cost half a minute and a line on stderr in whichever test came first."""
    root = tmp_path_factory.mktemp("cache")
    (root / "models").symlink_to(cache_root() / "models", target_is_directory=True)
    for name in PAIR:
        os.environ["NUMPREC_CACHE"] = str(root)
        target = quantized_dir(get_model("smollm2-arith"), precision_registry()[name])
        shutil.copytree(checkpoints[name], target)
    os.environ.pop("NUMPREC_CACHE")
    return root


@pytest.fixture(scope="module")
def mixer(checkpoints):  # noqa: F811
    registry = precision_registry()
    target, kept = (HFBackend(str(checkpoints[name]), registry[name]) for name in PAIR)
    return Mixer(target.model, kept.model, *PAIR), target, kept


def logits(model, ids) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits


def test_the_mixer_computes_each_uniform_model_exactly_and_a_mix_as_neither(mixer):
    mix, target, kept = mixer
    ids = target.tokenizer("12 + 345 = 357", add_special_tokens=False)["input_ids"]
    alone_target = logits(target.model, ids)
    mix.use(mix.layers)
    assert torch.equal(logits(mix.model, ids), logits(kept.model, ids)), "every layer kept: the kept model"
    (down,) = [group for group in module_groups(mix.model) if group.name == "block 3 down"]
    mix.use(down.layers)
    mixed = logits(mix.model, ids)
    mix.use(())
    assert torch.equal(logits(mix.model, ids), alone_target), "nothing kept: the target model"
    assert not torch.equal(mixed, alone_target) and not torch.equal(mixed, logits(kept.model, ids))


def test_a_groups_configuration_computes_from_its_block_on_and_scores_as_a_whole_pass(mixer, tmp_path):
    """The table's configurations replay the blocks before their group's from the uniform model they start from:
    every row equals a whole forward pass's, and a group's configuration calls none of the blocks before its own."""
    mix, target, _ = mixer
    problems = [("add", problem) for problem in generate(parse_task("add"), 10, 2, 6, 3)]
    batch = teacher_batch(target.tokenizer, target.chat_prompt, problems)
    lm_head = Group("lm_head", None, "lm_head", ("lm_head",))  # after every block: all of them replayed
    groups = [group for group in module_groups(mix.model) if group.name in ("block 2 down", "block 3 o")] + [lm_head]
    first_block_calls = []
    hook = mix.model.model.layers[0].register_forward_hook(lambda *args: first_block_calls.append(1))
    try:
        fill_table(mix, jobs(groups, mix.layers), batch, target.pad_id, tmp_path / "reused.csv")
    finally:
        hook.remove()
    assert len(first_block_calls) == 2 * 2, "block 0 computed for the two uniform models' prefix and rows only"
    whole = [csv_line(COLUMNS)]
    for job in jobs(groups, mix.layers):
        mix.use(job.kept)
        scores = score(mix.model, batch, target.pad_id)
        whole += [csv_line(row) for row in cell_rows(job, batch, scores.logprob, scores.exact)]
    mix.use(())
    assert (tmp_path / "reused.csv").read_text() == "".join(whole)


def test_a_mix_computed_from_a_recorded_mix_is_a_whole_pass(mixer):
    """The search grows mixes from its current one: a mix scored from a recorded mix that is neither uniform model
    (block 1's down kept) computes from the first block it changes, and scores bit for bit as a whole pass."""
    mix, target, _ = mixer
    problems = [("add", problem) for problem in generate(parse_task("add"), 10, 2, 5, 4)]
    batch = teacher_batch(target.tokenizer, target.chat_prompt, problems)
    groups = {group.name: group.layers for group in module_groups(mix.model)}
    mixes = MixScores(mix, batch, target.pad_id)
    mixes.base(groups["block 1 down"])
    grown = groups["block 1 down"] + groups["block 3 o"]
    block_calls: list[int] = []
    hooks = [
        block.register_forward_hook(lambda *args, index=index: block_calls.append(index))
        for index, block in enumerate(mix.model.model.layers)
    ]
    try:
        replayed = mixes.of(grown)
    finally:
        for hook in hooks:
            hook.remove()
    assert set(block_calls) == {3}, "the blocks before block 3's o are handed over as recorded"
    mix.use(grown)
    whole = score(mix.model, batch, target.pad_id)
    mix.use(())
    assert torch.equal(replayed.logprob, whole.logprob) and torch.equal(replayed.exact, whole.exact)


def test_a_stored_mix_is_read_back_not_scored_again(mixer, tmp_path):
    """Another budget's search walks the same path: with a store, each mix scored is appended as it is scored, and
    a second search reads it back bit for bit with no forward pass; a line a kill cut short is scored again."""
    mix, target, _ = mixer
    problems = [("add", problem) for problem in generate(parse_task("add"), 10, 2, 5, 4)]
    batch = teacher_batch(target.tokenizer, target.chat_prompt, problems)
    groups = {group.name: group.layers for group in module_groups(mix.model)}
    path = [(), groups["block 1 down"], groups["block 1 down"] + groups["block 3 o"]]
    store = tmp_path / "mixes.jsonl"

    def walk(mixes: MixScores) -> list:
        found = [mixes.base(path[0]), mixes.of(path[1])]
        mixes.forget(path[0])
        return found + [mixes.base(path[1]), mixes.of(path[2])]

    first = MixScores(mix, batch, target.pad_id, store=store)
    scored = walk(first)
    assert first.passes == 4 and len(store.read_text().splitlines()) == 3  # base 1 recorded by a pass of its own
    again = MixScores(mix, batch, target.pad_id, store=store)
    blocks: list[int] = []
    hooks = [block.register_forward_hook(lambda *args: blocks.append(1)) for block in mix.model.model.layers]
    try:
        read = walk(again)
    finally:
        for hook in hooks:
            hook.remove()
    assert again.passes == 0 and not blocks
    assert all(
        torch.equal(a.logprob, b.logprob) and torch.equal(a.exact, b.exact) for a, b in zip(scored, read, strict=True)
    )

    lines = store.read_text().splitlines()
    store.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])  # a kill in the last append
    cut = MixScores(mix, batch, target.pad_id, store=store)
    last = walk(cut)[-1]
    # the cut mix is computed again from base 1, which is recorded first (a pass), and appended whole
    assert cut.passes == 2 and torch.equal(last.logprob, scored[-1].logprob)
    assert len(read_store(store, len(batch.rows))) == 3


def test_a_table_of_a_checkpoint_made_again_is_not_reused(cache, tmp_path, capsys):
    """A table records its checkpoints by their contents: the FP8 checkpoint made again (here: its config rewritten)
    makes the directory another search's, refused in one line, where a name alone would have reused it. A directory
    holding only what a kill during the record's first write leaves (its temporary) is the command's own."""
    root = tmp_path / "cache"
    shutil.copytree(cache, root, symlinks=True)
    out = tmp_path / "sens"
    out.mkdir()
    (out / ".sensitivity.json.k2x9a1.tmp").write_text('{"written_by": "harn')
    code, err, _ = with_cache(root, "harness.sensitivity", sensitivity(out), capsys)
    assert code == 0, err
    os.environ["NUMPREC_CACHE"] = str(root)
    try:
        config = quantized_dir(get_model("smollm2-arith"), precision_registry()["fp8-dynamic"]) / "config.json"
    finally:
        os.environ.pop("NUMPREC_CACHE")
    config.write_text(config.read_text() + "\n")
    code, lines, _ = with_cache(root, "harness.sensitivity", sensitivity(out), capsys)
    assert code == 2 and len(lines) == 1 and "holds the table of another search (checkpoints differ)" in lines[0], lines


def sensitivity(out, *extra) -> list[str]:
    return ["--precision", "nvfp4", "--keep", "fp8-dynamic", "--samples", "3", "--lengths", "1,2", *extra,
            "--out", str(out)]  # fmt: skip


def rows(out) -> list[dict]:
    with open(out / "table.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def with_cache(cache, module: str, argv: list, capsys):
    os.environ["NUMPREC_CACHE"] = str(cache)
    try:
        return command(module, argv, capsys)
    finally:
        os.environ.pop("NUMPREC_CACHE")


def test_the_table_holds_every_group_two_ways_and_a_killed_one_resumes(cache, tmp_path, capsys):
    env = {**command_env(), "NUMPREC_CACHE": str(cache)}
    out = tmp_path / "sens"
    child = subprocess.Popen(
        [sys.executable, "-m", "harness.sensitivity", *sensitivity(out)], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:  # killed once a few configurations are in the table (bounded: 5 minutes)
        for _ in range(600):
            if child.poll() is not None or ((out / "table.csv").exists() and len(rows(out)) >= 8):
                break
            time.sleep(0.5)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL, "the kill came before the command finished"
    before = rows(out)
    assert len(before) >= 8, "the table was being written when the kill came"
    code, err, said = with_cache(cache, "harness.sensitivity", sensitivity(out), capsys)
    assert code == 0, err
    assert any(line.startswith("scoring 16 groups two ways") for line in err), "the rest of the table shows progress"
    table = rows(out)
    configurations = 2 + 2 * 4 * 4  # the uniform two, then the small Llama's 16 groups two ways (lm_head unquantized)
    assert len({(row["group"], row["scoring"]) for row in table}) == configurations
    assert table[: len(before)] == before, "what the killed run scored is kept, not scored again"
    assert len(table) == 2 * configurations and {(row["task"], row["length"]) for row in table} == {
        ("add", "1"),
        ("add", "2"),
    }
    record = json.loads((out / "sensitivity.json").read_text())
    assert set(record["phases"]) == {"load", "table", "draw"}
    assert record["bits"]["nvfp4"] == pytest.approx(4.5, abs=0.01) and record["bits"]["fp8-dynamic"] > 8
    assert (out / "heatmap.png").read_bytes()[:4] == b"\x89PNG" and "restoring one group buys most" in said
    again = with_cache(cache, "harness.sensitivity", sensitivity(out), capsys)
    assert again[0] == 0 and rows(out) == table, "a finished table is reused, not scored again"
    assert not any("groups two ways" in line for line in again[1]), "no bar where nothing is left to score"


def test_a_budget_writes_a_recipe_whose_layers_match_its_groups_and_bits(cache, tmp_path, capsys):
    """Within a budget between the two formats' bits: the recipe names every quantized layer once, its kept groups'
    layers at FP8 and the rest at NVFP4, and its bits (as the checkpoints store them) stay within the budget."""
    out = tmp_path / "sens"
    code, err, said = with_cache(cache, "harness.sensitivity", sensitivity(out, "--budget-bits", "5"), capsys)
    assert code == 0, err
    record = json.loads((out / "sensitivity.json").read_text())["recipes"]["5bits"]
    assert 4.5 <= record["bits"] <= 5 and "recipe within 5 bits" in said
    recipe = read_recipe((out / record["file"]).read_text(), record["file"])
    layers = {name: group["targets"] for name, group in recipe.groups.items()}
    layers["ignore"] = recipe.quantization["ignore"]
    assert layers["ignore"] == ["lm_head"] and recipe.rounding == "rtn"
    names = [f"model.layers.{block}.{member}" for block in range(4) for member in MEMBERS]
    owner = {name: [group for group, patterns in layers.items() if any(matches(p, name) for p in patterns)]
             for name in names}  # fmt: skip
    assert all(len(groups) == 1 for groups in owner.values()), "each layer in exactly one group"
    kept = {name for name, groups in owner.items() if groups == ["group_1"]}
    assert len(kept) == record["layers"] and (len(kept) > 0) == bool(record["kept"])


def test_the_search_scores_mixes_whole_and_its_recipe_beats_every_rule_that_fits(cache, tmp_path, capsys):
    """The recipe is the best mix the search scored within the budget: each rule that fits, scored here as a whole
    pass of the mixer on the same problems, is no better on them (exact match, then the answer's log-probability);
    --rank quantize-one takes its candidate groups by quantize one's cost, written under a name of its own, and reads
    back the mixes the first search scored."""
    out = tmp_path / "sens"
    argv = sensitivity(out, "--budget-bits", "5.5")
    assert with_cache(cache, "harness.sensitivity", argv, capsys)[0] == 0
    code, err, said = with_cache(cache, "harness.sensitivity", [*argv, "--rank", "quantize-one"], capsys)
    assert code == 0, err
    recipes = json.loads((out / "sensitivity.json").read_text())["recipes"]
    ranked = recipes["5.5bits-by-quantize-one"]
    assert "5.5bits" in recipes and ranked["file"] == "recipe-5.5bits-by-quantize-one.yaml"
    assert "top 12 groups by quantize-one costs" in (out / ranked["file"]).read_text()
    recipe = recipes["5.5bits"]
    # the second search reads back from mixes.jsonl the mixes the first scored (the rules alone among them)
    assert recipe["computed"] >= recipe["scored"] and ranked["computed"] < ranked["scored"]
    assert recipe["source"] in ("search", "table") or recipe["source"].startswith("rule ")
    os.environ["NUMPREC_CACHE"] = str(cache)
    try:
        specs = [precision_registry()[name] for name in PAIR]
        made = {spec.name: quantized_dir(get_model("smollm2-arith"), spec) for spec in specs}
        target, kept = (HFBackend(str(made[spec.name]), spec) for spec in specs)
    finally:
        os.environ.pop("NUMPREC_CACHE")
    mix = Mixer(target.model, kept.model, *PAIR)
    problems = [("add", problem) for length in (1, 2) for problem in heldout_problems(
        parse_task("add"), 10, length, 3, 0, HELD_OUT_COUNT, "calibration")[0]]  # fmt: skip
    batch = teacher_batch(target.tokenizer, target.chat_prompt, problems)
    groups = {group.name: group for group in module_groups(mix.model)}
    shapes = {name: (layer.out_features, layer.in_features) for name, layer in mix.own.items()}
    quantized = mix.quantized(list(shapes))  # bits as the checkpoints store them, layer by layer
    stored = {spec.name: precision_bits(spec, made[spec.name], shapes) for spec in specs}
    fitting = 0
    for name, members in rules(list(groups.values())).items():
        layers = [layer for group in members for layer in groups[group].layers]
        bits = mean_bits({layer: stored["fp8-dynamic" if layer in layers else "nvfp4"][layer] for layer in quantized},
                         shapes, quantized)  # fmt: skip
        if bits > 5.5:
            continue
        fitting += 1
        mix.use(layers)
        scores = score(mix.model, batch, target.pad_id)
        found = (scores.exact.double().mean().item(), scores.logprob.mean().item())
        assert found <= (recipe["exact"], recipe["logprob"] + 1e-9), f"rule {name} beats the recipe on its problems"
    mix.use(())
    assert fitting, "some rule fits 5.5 bits"
    assert recipe["scored"] > fitting, "nothing kept, every rule that fits, and the path's mixes"
    assert recipe["best_rule"] is not None and recipe["best_rule"]["bits"] <= 5.5


def test_a_recipe_confirmed_on_fresh_problems_is_paired_against_fp32(cache, tmp_path, capsys):
    """--confirm-seed: every variant at the recipe's bits and both uniform models, each cell paired against fp32
    (here the real fine-tuned model's fp32, the small Llama's mixes beside it), written and drawn."""
    out = tmp_path / "sens"
    args = sensitivity(out, "--budget-bits", "5", "--confirm-seed", "1", "--confirm-samples", "4")
    code, err, said = with_cache(cache, "harness.sensitivity", args, capsys)
    assert code == 0, err
    with open(out / "confirm-5bits.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    variants = {row["variant"] for row in table}
    assert {"nvfp4", "fp8-dynamic", "heuristic", "random", "quantize-one ranking", "restore-one ranking"} <= variants
    (recipe,) = [name for name in variants if name.startswith("recipe ")]
    (rule,) = [name for name in variants if name.startswith("rule: ")]
    head_to_head = {(row["baseline"], row["variant"]) for row in table if row["baseline"] != "fp32"}
    assert head_to_head == {(rule, recipe), ("restore-one ranking", recipe)}, "the recipe against the simple choices"
    assert len(table) == (len(variants) + 2) * 2 and all(int(row["n"]) == 4 for row in table), "each cell's 4"
    assert "paired problems a cell at the discordance seen here" in said
    assert (out / "frontier.png").read_bytes()[:4] == b"\x89PNG"


def test_a_margin_no_mix_meets_is_one_line_naming_the_best_found(cache, tmp_path, capsys):
    """--margin against fp32 (the real fine-tuned model, which answers these short additions): no mix of the small
    Llama's random weights comes near, so the command says so in one line, with the best mix it scored and how far
    short it falls, and writes no recipe; the recipe an earlier budget wrote stays recorded."""
    out = tmp_path / "sens"
    assert with_cache(cache, "harness.sensitivity", sensitivity(out, "--budget-bits", "5"), capsys)[0] == 0
    code, err, said = with_cache(cache, "harness.sensitivity", sensitivity(out, "--margin", "0.05"), capsys)
    lines = without_bars(err)
    assert code == 2 and len(lines) == 1, err
    assert any(line.startswith("scoring mixes whole:") for line in err), "the mixes' scoring showed its progress"
    assert re.search(r"no mix of nvfp4 and fp8-dynamic keeps exact match at n=2 within 0.05 of fp32 .* the best "
                     r"found \(\d+ groups kept, [\d.]+ bits\) falls [01]\.\d+ short", lines[0]), lines[0]  # fmt: skip
    assert [path.name for path in out.glob("recipe-*.yaml")] == ["recipe-5bits.yaml"]
    assert list(json.loads((out / "sensitivity.json").read_text())["recipes"]) == ["5bits"]


MEMBERS = [member for members in KINDS.values() for member in members]


def matches(pattern: str, name: str) -> bool:
    return re.match(pattern.removeprefix("re:"), name) is not None if pattern.startswith("re:") else pattern == name


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--precision", "fp8-dynamic", "--keep", "nvfp4"], "is not higher than --precision fp8-dynamic"),
        (["--precision", "bf16", "--keep", "fp32"], "not a quantized format"),
        (["--precision", "nvfp4", "--keep", "nf4"], "not a format harness.sensitivity mixes"),
        (["--precision", "nvfp4", "--keep", "bf16", "--groups", "heads"], "invalid choice"),
        (["--precision", "nvfp4-a16+autoround", "--keep", "bf16"], "nvfp4-a16+gptq, nvfp4-a16+awq"),
        (["--precision", "nvfp4", "--keep", "fp8-dynamic", "--budget-bits", "4"], "is below what nvfp4 itself takes"),
        (["--precision", "nvfp4", "--keep", "fp8-dynamic", "--confirm-seed", "1"], "give --budget-bits B or --margin"),
        (["--precision", "nvfp4", "--keep", "fp8-dynamic", "--margin", "2"], "between 0 and 1 (0.02: two points)"),
        (["--precision", "nvfp4", "--keep", "fp8-dynamic", "--margin", ".1", "--budget-bits", "5"], "not allowed with"),
        (["--precision", "nvfp4+gptq", "--rounding", "awq", "--keep", "fp8-dynamic"], "names its rounding already"),
        (["--precision", "nvfp4", "--rounding", "spinquant", "--keep", "fp8-dynamic"], "invalid choice"),
        (["--precision", "nvfp4", "--keep", "fp8-dynamic", "--candidates", "-1"], "must be at least 0"),
    ],
)
def test_bad_input_is_one_line(args, fragment, cache, tmp_path, capsys):
    os.environ["NUMPREC_CACHE"] = str(cache)
    try:
        refused("harness.sensitivity", [*args, "--out", tmp_path / "out"], capsys, fragment)
    finally:
        os.environ.pop("NUMPREC_CACHE")
    assert not (tmp_path / "out").exists()


def test_a_recipe_that_is_not_one_is_one_line(tmp_path):
    bad = tmp_path / "recipe.yaml"
    bad.write_text("quant_stage: {}\n")
    result = run_module("harness.quantize", "--recipe", str(bad), "--out", str(tmp_path / "mix"))
    assert_user_error(result, "is not an llm-compressor recipe numprec reads")
    assert not (tmp_path / "mix").exists()
