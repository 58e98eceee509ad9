"""Make a quantized checkpoint of a registered model with llm-compressor: W4A16 GPTQ or AWQ, or a format of now
rounded by a method of its (models/rounding.py: rtn, gptq, awq, autoround).

    python -m harness.quantize --model smollm2 --method gptq --bits 4 --group-size 64
    python -m harness.quantize --model smollm2 --method awq --bits 4 --group-size 64 --samples 64
    python -m harness.quantize --model smollm2-arith --precision fp8-dynamic   # nvfp4, mxfp4, w8a8-int8, ...
    python -m harness.quantize --model smollm2-arith --precision nvfp4 --rounding gptq   # or --precision nvfp4+gptq
    python -m harness.eval --precision gptq-w4,fp8-dynamic,nvfp4+gptq   # made on first use; or --model-path DIR
    python -m harness.quantize --model smollm2 --model-path MERGED_DIR --method gptq --out DIR  # your own weights

GPTQ checkpoints are written as compressed-tensors. AWQ checkpoints are written by default in AutoAWQ's
GEMM format (``harness/models/autoawq.py``): the format of the paper's int4 Llama, which transformers loads
through gptqmodel's AWQ kernels, so ``awq-w4`` on the default model takes the ``llama-int4`` preset's own
loading path; ``--format compressed-tensors`` keeps llm-compressor's format instead. ``--precision NAME`` makes a
precision of the registry's formats (FP8, INT8 W8A8, W4A8, NVFP4, MXFP4, MXFP8) with its llm-compressor scheme:
data-free where the scheme's scales are all found from the weights or at run time, calibrated where it has static
activation scales (NVFP4's global scale) or a calibrating recipe (w8a8-int8: SmoothQuant, then GPTQ).

Calibration uses problems this project generates (the paper's tasks and few-shot prompts, answered
correctly), drawn from a "calibration" stream and disjoint from the problems harness.eval scores; no hub
data sets. llm-compressor pins an older transformers than the main environment, so it lives in its own
environment (``bash scripts/setup_quantize.sh`` makes ``.venv-quantize``); run from the main environment,
this command hands itself over to that one. Both environments pin compressed-tensors to the same version,
so the checkpoint written there loads back here (``pyproject.toml``, ``scripts/setup_quantize.sh``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness.core.bounds import SEED, Bound
from harness.core.cli import ArgParser, command_line, input_path, output_dir, run
from harness.core.errors import UserError
from harness.core.files import follow_umask, move_aside
from harness.core.lock import DirectoryLock
from harness.core.paths import quantize_command
from harness.models import (
    W4_PRECISIONS,
    ModelSpec,
    PrecisionSpec,
    get_model,
    get_precision,
    named_rounding,
    precision_registry,
)
from harness.models.autoawq import require_gptqmodel
from harness.models.checkpoints import check_unquantized, read_checkpoint
from harness.models.recipe_files import read_recipe, recipe_text
from harness.models.rounding import ROUNDINGS
from harness.models.weights import quantized_dir, resolve_weights
from harness.questions.problems import HELD_OUT_COUNT, TRAINING_LENGTHS, heldout_problems, parse_task
from harness.questions.prompts import user_message

HANDED_OVER = "NUMPREC_QUANTIZE_HANDED_OVER"  # set for the quantization environment's process
FORMATS = ("compressed-tensors", "autoawq")
CALIBRATION_TASKS = ("add", "iter_add:3", "mul")
GROUP_SIZE = Bound(8, 4096, "a group spans at most one row of weights; GPTQ and AWQ use 32-128")
CALIBRATION = Bound(1, 16_384, "llm-compressor's AWQ/GPTQ recipes calibrate on 128-512 samples")
# --samples' defaults: W4A16's (the published recipes'), a format's by its own rounding, a format by a named method
# (GPTQ of NVFP4 on smollm2-arith, 2 cores: 64 problems 103 s, 128 159 s, 256 273 s)
W4_CALIBRATION, FORMAT_CALIBRATION, ROUNDING_CALIBRATION = 256, 64, 128


def calibration_texts(tokenizer, count: int, seed: int) -> list[str]:
    """Chat-formatted prompt + correct answer, spread over tasks and operand lengths 1-9."""
    texts: list[str] = []
    cells = [(task, length) for task in CALIBRATION_TASKS for length in TRAINING_LENGTHS]
    per_cell = -(-count // len(cells))
    for label, length in cells:
        task = parse_task(label)
        problems, _ = heldout_problems(
            task, 10, length, per_cell, seed, eval_count=HELD_OUT_COUNT, stream="calibration"
        )
        for problem in problems:
            messages = [
                {"role": "user", "content": user_message(problem)},
                {"role": "assistant", "content": f"{problem.expression} = {problem.answer}"},
            ]
            texts.append(tokenizer.apply_chat_template(messages, tokenize=False))
    return texts[:count]


def recipe(precision: PrecisionSpec, group_size: int) -> str:
    """The llm-compressor recipe that makes ``precision``: its scheme (its group size set where the format leaves it
    open; int4 W4A16 for gptq-w4 and awq-w4), rounded by its method (models/rounding.py). The tied lm_head/embedding
    stays in the model's dtype, as in the paper's AWQ checkpoint."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme, preset_name_to_scheme

    if precision.method == "compressed":
        scheme = preset_name_to_scheme(precision.scheme, ["Linear"])
        if precision.group_adjustable:
            scheme.weights = scheme.weights.model_copy(update={"group_size": group_size})
    else:
        weights = QuantizationArgs(
            num_bits=precision.weight_bits,
            type="int",
            symmetric=precision.method == "gptq",
            strategy="group",
            group_size=group_size,
        )
        scheme = QuantizationScheme(targets=["Linear"], weights=weights)
    groups = {"group_0": scheme.model_dump(mode="json", exclude_none=True)}
    note = f"{precision.name}: {ROUNDINGS[precision.rounding].summary} (python -m harness.quantize)"
    return recipe_text(groups, ["lm_head"], precision.rounding, note, precision.scheme)


def calibrates(precision: PrecisionSpec) -> bool:
    """Whether making ``precision`` reads calibration problems (GPTQ, AWQ, AutoRound, static activation scales)."""
    return ROUNDINGS[precision.rounding].calibrates or precision.calibrate


def cpu_pinned_memory_workaround() -> None:
    """llm-compressor's AWQ pins calibration tensors for faster GPU transfer; without an accelerator
    ``pin_memory()`` raises, so on CPU pinning is skipped (platform-facts: AWQ on CPU)."""
    import torch

    if torch.accelerator.is_available():
        return
    from llmcompressor.pipelines.cache import IntermediatesCache

    IntermediatesCache.pin_memory = lambda self, batch_index, input_names=None: None


def calibration_dtype() -> str:
    """bfloat16, the checkpoint's dtype, where the hardware multiplies it natively (a GPU, a CPU with bf16
    instructions); float32 on other CPUs, where bfloat16 matmuls run several times slower than float32 (AWQ's
    calibration of the default model took 8 minutes in bf16 on an AVX2-only CPU). Recorded in the checkpoint's
    numprec_quantize.json; the saved checkpoint is bfloat16 either way."""
    import torch

    from harness.core.machine import cpu_bf16_instructions

    return "bfloat16" if torch.accelerator.is_available() or cpu_bf16_instructions() else "float32"


@contextlib.contextmanager
def calibration_progress(description: str):
    """numprec's own bar over llm-compressor's calibration: its pipeline opens a tqdm bar per layer group, described
    "(i/n): Calibrating"; while calibrating, every bar other libraries open is off (unless --verbose) and such a
    description moves this one to i of n. A data-free scheme opens no such bar, and shows none."""
    import tqdm as tqdm_module

    from harness.core.quiet import verbose

    if verbose():
        yield
        return
    bars = []
    original = tqdm_module.tqdm.__init__

    def quiet_init(bar, *args, **kwargs):
        if kwargs.get("desc") == description:  # numprec's own bar, opened just below: on, whatever TQDM_DISABLE says
            original(bar, *args, **kwargs)
            return
        match = re.match(r"\((\d+)/(\d+)\): Calibrating", str(kwargs.get("desc", "")))
        if match:
            if not bars:
                own = {"unit": "layer group", "file": sys.stderr, "disable": False}
                bars.append(tqdm_module.tqdm(total=int(match[2]), desc=description, **own))
            bars[0].update(int(match[1]) - 1 - bars[0].n)
        original(bar, *args, **{**kwargs, "disable": True})

    tqdm_module.tqdm.__init__ = quiet_init
    try:
        yield
        if bars:
            bars[0].update(bars[0].total - bars[0].n)
    finally:
        tqdm_module.tqdm.__init__ = original
        for bar in bars:
            bar.close()


def quantize(
    model_name: str,
    precision: PrecisionSpec | None,
    group_size: int,
    out: Path,
    samples: int,
    seed: int,
    model_path: str | None = None,
    recipe_file: Path | None = None,
) -> dict:
    """``model_name``'s checkpoint at ``precision``, or mixed as ``recipe_file`` (an llm-compressor recipe, which
    calibrates: a mix may hold NVFP4's static scales), written to ``out``."""
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_model(model_name)
    source = resolve_weights(model, model_path)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(source)
    # llm-compressor computes the codes when the checkpoint is saved, from the weights and scales as they are then
    # (bfloat16, after the cast below), whatever dtype the calibration ran in.
    calibration = calibration_dtype()
    network = AutoModelForCausalLM.from_pretrained(source, dtype=getattr(torch, calibration))
    texts = calibration_texts(tokenizer, samples, seed) if recipe_file or calibrates(precision) else []
    made = recipe_file.read_text(encoding="utf-8") if recipe_file else recipe(precision, group_size)
    rounding = precision.rounding if precision else read_recipe(made, str(recipe_file)).rounding
    data = {}
    if texts:
        dataset = Dataset.from_dict(tokenizer(texts, add_special_tokens=False))
        longest = max(len(ids) for ids in dataset["input_ids"])
        data = {"dataset": dataset, "max_seq_length": longest, "num_calibration_samples": len(texts)}
    cpu_pinned_memory_workaround()  # AWQ's, in a recipe of its own or of a mix
    from harness.models import fp4

    fp4.register()  # E2M1 rounding and packing in one pass on a CPU (NVFP4, MXFP4)
    started = time.perf_counter()
    name = precision.name if precision else f"the mix of {recipe_file.name}"
    with calibration_progress(f"calibrating {model_name} ({name})"):
        oneshot(model=network, recipe=made, **data)
        seconds = time.perf_counter() - started
        network.to(torch.bfloat16)  # the checkpoint's dtype (scales, embedding), whatever the calibration ran in
        staging = out.with_name(out.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        network.save_pretrained(staging, save_compressed=True)
    tokenizer.save_pretrained(staging)
    info = {
        "model": model_name,
        "source": str(source),
        "method": precision.method if precision else "compressed",
        "precision": precision.name if precision else "mixed",
        "scheme": precision.scheme if precision else None,
        "rounding": rounding,
        "rounding_settings": ROUNDINGS[rounding].settings,
        "recipe_file": made,  # the recipe it ran, as text
        "bits": precision.weight_bits if precision else None,
        "group_size": group_size,
        "calibration_samples": len(texts),
        "calibration_tasks": list(CALIBRATION_TASKS) if texts else [],
        "calibration_dtype": calibration,
        "seed": seed,
        "seconds": round(seconds, 1),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",  # where oneshot ran
        "versions": _versions("llmcompressor", "compressed-tensors", "transformers", "torch"),
    }
    (staging / "numprec_quantize.json").write_text(json.dumps(info, indent=2) + "\n")
    follow_umask(staging)
    if out.exists():  # an earlier checkpoint of harness.quantize's (check_checkpoint_out): kept, not deleted
        print(f"moved the previous {out.name} aside to {move_aside(out).name}")
    os.replace(staging, out)
    return info


def check_checkpoint_out(out: Path) -> None:
    """The checkpoint directory is replaced whole when it is done: --out must be a new or empty directory, or a
    checkpoint harness.quantize wrote (numprec_quantize.json beside its weights), never a directory of anything else,
    and never the working directory or one holding it."""
    resolved, here = out.resolve(), Path.cwd().resolve()
    if resolved == here or resolved in here.parents:
        raise UserError(
            f"--out {out} is the working directory (or holds it), which the checkpoint would replace; give a new "
            "directory's name (e.g. runs/smollm2-awq)"
        )
    if out.is_dir() and any(out.iterdir()) and not (out / "numprec_quantize.json").is_file():
        raise UserError(
            f"--out {out} holds files that are not a checkpoint harness.quantize wrote, and the checkpoint replaces "
            "the directory whole; give a new directory's name"
        )


def check_group_size(
    model: ModelSpec, group_size: int, model_path: str | None = None, precision: PrecisionSpec | None = None
) -> None:
    """Groups must tile every quantized row; llm-compressor would find out only after loading the model. A format
    whose groups are its own (fp8-block's 128) cannot be made of a model they do not tile."""
    if group_size < 1:
        raise UserError(f"--group-size must be positive, got {group_size}")
    local = model_path or model.kind != "hub"
    config_path = Path(resolve_weights(model, model_path)) / "config.json" if local else None
    if config_path is None or not config_path.is_file():
        return
    config = json.loads(config_path.read_text(encoding="utf-8"))
    widths = {config.get("hidden_size"), config.get("intermediate_size")} - {None}
    bad = sorted(width for width in widths if width % group_size)
    if bad and precision is not None and not precision.group_adjustable:
        raise UserError(
            f"{precision.name} quantizes in groups of {group_size}, which do not tile {model.name}'s layer widths "
            f"{sorted(widths)}; this format cannot be made of this model"
        )
    if bad:
        fits = [g for g in (32, 64, 128) if all(width % g == 0 for width in widths)]
        raise UserError(
            f"--group-size {group_size} does not divide {model.name}'s layer widths {sorted(widths)}; "
            f"use one of {fits or 'a divisor of them'}"
        )


def _versions(*names: str) -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in names}


def _hand_over(argv: Sequence[str]) -> int:
    """Run this command in the quantization environment, where llm-compressor's pins hold."""
    command = quantize_command()
    if command is None:
        raise UserError(
            "llm-compressor is not installed here (it pins an older transformers); "
            "run: bash scripts/setup_quantize.sh, then repeat this command"
        )
    python, env = command
    return subprocess.call([*python, "-m", "harness.quantize", *argv], env={**env, HANDED_OVER: "1"})


def calibration_argv(args, precision: PrecisionSpec, group_size: int, calibrated: Path, model_path: str | None):
    """This command's arguments for the quantization environment: the calibration alone, into ``calibrated``, in
    compressed-tensors format (a conversion to AutoAWQ is done here afterwards)."""
    argv = ["--model", args.model, "--precision", precision.name, "--samples", str(args.samples)]
    argv += ["--seed", str(args.seed)] + (["--group-size", str(group_size)] if group_size else [])
    argv += ["--out", str(calibrated), "--format", "compressed-tensors"]
    return argv + (["--model-path", model_path] if model_path else [])


def parse_args(argv: Sequence[str] | None):
    parser = ArgParser(prog="python -m harness.quantize", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="a model from harness/models.yaml (default: smollm2)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--method", choices=sorted(W4_PRECISIONS), help="W4A16 by GPTQ or AWQ (gptq-w4, awq-w4)")
    made = [name for name, spec in precision_registry().items() if spec.prequantized]
    which.add_argument(
        "--precision", metavar="NAME", help=f"a precision: {', '.join(made)}, or FORMAT+METHOD (nvfp4+gptq)"
    )
    which.add_argument(
        "--recipe", type=input_path, help="a mix of formats: an llm-compressor recipe (harness.sensitivity writes one)"
    )
    parser.add_argument(
        "--rounding",
        choices=list(ROUNDINGS),
        metavar="METHOD",
        help=f"how the format's weights are rounded: {', '.join(ROUNDINGS)} (default: the format's own, rtn for most)",
    )
    parser.add_argument("--bits", type=int, help="weight bits (the precision's: 4 for W4A16)")
    parser.add_argument(
        "--group-size", type=GROUP_SIZE.arg, help="weights per quantization group (default: the registry's)"
    )
    parser.add_argument(
        "--samples",
        type=CALIBRATION.arg,
        help="calibration problems (default 256 for GPTQ/AWQ W4A16, 128 for a format by a named --rounding, 64 for the "
        "formats that calibrate by their own: nvfp4, w8a8-int8)",
    )
    parser.add_argument("--seed", type=SEED.arg, default=0)
    parser.add_argument(
        "--model-path",
        type=input_path,
        help="quantize the weights in this directory instead (a fine-tuned or merged checkpoint of --model; needs "
        "--out)",
    )
    parser.add_argument("--out", type=output_dir, help="checkpoint directory (default: where harness.eval looks)")
    parser.add_argument(
        "--format", choices=FORMATS, help="checkpoint format (default: autoawq for awq, compressed-tensors otherwise)"
    )
    return parser.parse_args(argv)


def checked_settings(args) -> tuple[ModelSpec, PrecisionSpec, int, str | None, Path, str]:
    """The model, precision, group size, source directory, output directory and checkpoint format of a command line,
    each checked before any weights load."""
    model = get_model(args.model)
    if args.method and args.rounding:
        raise UserError(f"--method {args.method} is its rounding already; leave out --rounding, or use --precision")
    precision = get_precision(model, named_rounding(args.precision or W4_PRECISIONS[args.method], args.rounding))
    if args.samples is None:
        # NVFP4's global scales and SmoothQuant's smoothing settle on few problems (256 took 199 s and 526 s here);
        # a named rounding method reads the inputs (GPTQ, AWQ, AutoRound) on more
        if precision.method != "compressed":
            args.samples = W4_CALIBRATION
        else:
            args.samples = ROUNDING_CALIBRATION if precision.names_rounding else FORMAT_CALIBRATION
    if args.bits is not None and args.bits != precision.weight_bits:
        raise UserError(f"--bits {args.bits}: the registered {precision.name} precision stores {precision.weight_bits}")
    group_size = args.group_size if args.group_size is not None else precision.group_size
    if group_size != precision.group_size and not precision.group_adjustable:
        fixed = f"groups of {precision.group_size}" if precision.group_size else "no groups"
        raise UserError(f"--group-size {group_size}: the {precision.name} format fixes {fixed}; leave it out")
    model_path = str(args.model_path) if args.model_path else None
    if model_path:
        if args.out is None:
            raise UserError(
                "--model-path needs --out DIR: the cache's checkpoint is the registry model's; evaluate yours with "
                "harness.eval --model-path DIR"
            )
        check_unquantized(read_checkpoint(model_path))
    if group_size:
        check_group_size(model, group_size, model_path, precision)
    out = args.out or quantized_dir(model, precision)
    check_checkpoint_out(out)
    if args.out is None and group_size != precision.group_size:
        raise UserError(
            f"--group-size {group_size} differs from {args.model}'s registered {precision.name} "
            f"(group {precision.group_size}); pass --out DIR and evaluate it with --model-path DIR"
        )
    if not os.environ.get(HANDED_OVER) and model.kind == "hub":
        resolve_weights(model, model_path)  # weights missing from this machine: said before anything is announced
    checkpoint_format = args.format or ("autoawq" if precision.method == "awq" else "compressed-tensors")
    if checkpoint_format == "autoawq":
        if precision.method != "awq":
            raise UserError(
                f"--format autoawq holds AWQ checkpoints; {precision.name} is written as compressed-tensors"
            )
        require_gptqmodel()  # the conversion packs with gptqmodel: fail now, not after the calibration
    return model, precision, group_size, model_path, out, checkpoint_format


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.recipe:
        return make_mix(args, argv)
    model, precision, group_size, model_path, out, checkpoint_format = checked_settings(args)
    # llm-compressor always writes compressed-tensors; AutoAWQ is a rewrite of the same codes afterwards.
    calibrated = out if checkpoint_format == "compressed-tensors" else out.with_name(out.name + ".compressed-tensors")
    # The checkpoint directory is replaced whole when it is done, so the writer's lock is on the folder holding it:
    # one quantization at a time per folder. In the quantization environment the main environment holds it.
    lock = None if os.environ.get(HANDED_OVER) else DirectoryLock(out.parent, command_line("harness.quantize", argv))
    try:
        try:
            import llmcompressor  # noqa: F401
        except ImportError:
            code = _hand_over(calibration_argv(args, precision, group_size, calibrated, model_path))
            if code:
                return code
        else:
            group = f" g{group_size}" if group_size else ""
            print(f"quantizing {model.name} to {precision.name}{group} -> {calibrated}", file=sys.stderr)
            info = quantize(model.name, precision, group_size, calibrated, args.samples, args.seed, model_path)
            print(f"wrote {calibrated} ({info['calibration_samples']} calibration problems, {info['seconds']:.0f} s)")
        if checkpoint_format == "autoawq":
            from harness.models.autoawq import to_autoawq

            converted = to_autoawq(calibrated, out)
            print(f"wrote {out} (AutoAWQ GEMM format, {converted['layers']} layers)")
    finally:
        if calibrated != out:
            shutil.rmtree(calibrated, ignore_errors=True)
        if lock:
            lock.release()
    return 0


def make_mix(args, argv: Sequence[str] | None) -> int:
    """--recipe: the mixed checkpoint its config groups describe, calibrated on the project's calibration stream
    (--samples, default 64), into --out."""
    model = get_model(args.model)
    if args.out is None:
        raise UserError("--recipe needs --out DIR: a mix has no place in the cache; evaluate it with --model-path DIR")
    read_recipe(args.recipe.read_text(encoding="utf-8"), f"--recipe {args.recipe}")
    if args.bits or args.group_size or args.format or args.rounding:
        raise UserError(
            "--recipe sets every layer's format and rounding itself: leave out --bits, --group-size, --format and "
            "--rounding"
        )
    check_checkpoint_out(args.out)
    model_path = str(args.model_path) if args.model_path else None
    if model_path:
        check_unquantized(read_checkpoint(model_path))
    args.samples = args.samples or FORMAT_CALIBRATION
    lock = (
        None if os.environ.get(HANDED_OVER) else DirectoryLock(args.out.parent, command_line("harness.quantize", argv))
    )
    try:
        try:
            import llmcompressor  # noqa: F401
        except ImportError:
            handed = ["--model", args.model, "--recipe", str(args.recipe.resolve()), "--samples", str(args.samples)]
            handed += ["--seed", str(args.seed), "--out", str(args.out)]
            return _hand_over(handed + (["--model-path", model_path] if model_path else []))
        print(f"quantizing {model.name} as {args.recipe.name} -> {args.out}", file=sys.stderr)
        info = quantize(model.name, None, 0, args.out, args.samples, args.seed, model_path, recipe_file=args.recipe)
        print(f"wrote {args.out} (a mix, {info['calibration_samples']} calibration problems, {info['seconds']:.0f} s)")
    finally:
        if lock:
            lock.release()
    return 0


if __name__ == "__main__":
    run(main)
