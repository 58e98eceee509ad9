"""A variant's weights are resolved once where they enter (harness/models/weights.py's plan_weights): a --model-path
directory's config.json and shard headers are read once for the whole run, at plan time, and what is loaded later
is the value the plan made, not the directory read again."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from harness.runs.config import build_spec, load_config
from harness.runs.plan import plan_variants
from tests.harness.helpers import ROOT

STDLIB = (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])
# The open reads a test is counting. An audit hook cannot be removed: it is added by the first count, in the worker
# that runs these tests only, and idles between counts.
_counting: list[list[str]] = []
_hooked: list[bool] = []


def _opened(event: str, args: tuple) -> None:
    if event != "open" or not _counting or not str(args[0]).endswith("config.json"):
        return
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(STDLIB + (__file__,)):
        frame = frame.f_back  # pathlib, json, io: the standard library's part of a read
    if frame is not None and frame.f_code.co_filename.startswith(str(ROOT / "harness")):
        _counting[-1].append(f"{args[0]} from {frame.f_code.co_filename}:{frame.f_lineno}")


def numprec_reads(work) -> list[str]:
    """The config.json files numprec's own code opens while ``work()`` runs (transformers' reads left out)."""
    if not _hooked:
        sys.addaudithook(_opened)
        _hooked.append(True)
    _counting.append([])
    try:
        work()
    finally:
        reads = _counting.pop()
    return reads


def test_a_model_path_is_read_once_for_every_variant_of_a_run(tiny_llama, tmp_path):
    """fp32 and bf16 of one --model-path directory: planned (every check made) and their weights made ready to
    load, with config.json opened by numprec once."""
    name, config = load_config("quick")
    spec = build_spec(
        name, config, models=["smollm2"], precisions=["fp32", "bf16"], tasks=["add"], lengths=[1], samples=2,
        model_path=str(tiny_llama), out=tmp_path / "run",
    )  # fmt: skip
    variants = []

    def plan_and_load() -> None:
        variants.extend(plan_variants(spec))
        for variant in variants:
            assert Path(variant.weights.ready()) == Path(tiny_llama)

    reads = numprec_reads(plan_and_load)
    assert [v.precision.name for v in variants] == ["fp32", "bf16"]
    assert len(reads) == 1, reads
    assert variants[0].weights.checkpoint is variants[1].weights.checkpoint, "one value, passed down"
    assert variants[0].weights.checkpoint.config["model_type"] == "llama"
    assert variants[0].weights.checkpoint.tensors, "the shard headers, read with it"


def test_reads_are_counted(tiny_llama):
    """The counter sees a read numprec makes (and so can fail): the directory read once more."""
    from harness.models.checkpoints import read_checkpoint

    assert len(numprec_reads(lambda: read_checkpoint(tiny_llama))) == 1


def test_a_quantized_checkpoint_is_read_once_from_plan_to_its_loader(tiny_llama, tmp_path):
    """A GPTQ checkpoint's --model-path (the small Llama's directory, its config declaring 4-bit GPTQ): planned at
    gptq-w4, and the transformers loader's arguments made from the checkpoint the plan read."""
    import json
    import shutil

    from harness.backends.hf_loading import load_kwargs

    checkpoint = tmp_path / "gptq"
    shutil.copytree(tiny_llama, checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 64}
    (checkpoint / "config.json").write_text(json.dumps(config))
    name, eval_config = load_config("quick")
    spec = build_spec(
        name, eval_config, models=["smollm2"], precisions=["gptq-w4"], tasks=["add"], lengths=[1], samples=2,
        model_path=str(checkpoint), out=tmp_path / "run",
    )  # fmt: skip
    kwargs = {}

    def plan_and_load() -> None:
        (variant,) = plan_variants(spec)
        kwargs.update(load_kwargs(variant.precision, "cpu", variant.weights.ready(), variant.weights.checkpoint))

    reads = numprec_reads(plan_and_load)
    assert len(reads) == 1, reads
    assert kwargs["dtype"] is not None and "quantization_config" not in kwargs, "GPTQ reads its own config"
