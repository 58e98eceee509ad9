"""Make a W4A16 GPTQ or AWQ checkpoint of a registered model with llm-compressor.

    python -m harness.quantize --model smollm2 --method gptq --bits 4 --group-size 64
    python -m harness.quantize --model smollm2 --method awq --bits 4 --group-size 64 --samples 64
    python -m harness.eval --precision gptq-w4,awq-w4   # finds them in the cache; or --model-path DIR
    python -m harness.quantize --model smollm2 --model-path MERGED_DIR --method gptq --out DIR  # your own weights

GPTQ checkpoints are written as compressed-tensors. AWQ checkpoints are written by default in AutoAWQ's
GEMM format (``harness/models/autoawq.py``): the format of the paper's int4 Llama, which transformers loads
through gptqmodel's AWQ kernels, so ``awq-w4`` on the default model takes the ``llama-int4`` preset's own
loading path; ``--format compressed-tensors`` keeps llm-compressor's format instead.

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
from harness.core.files import follow_umask
from harness.core.lock import DirectoryLock
from harness.models import W4_PRECISIONS, ModelSpec, get_model, get_precision
from harness.models.autoawq import require_gptqmodel
from harness.models.weights import check_unquantized, quantized_dir, resolve_weights
from harness.questions.problems import HELD_OUT_COUNT, TRAINING_LENGTHS, heldout_problems, parse_task
from harness.questions.prompts import user_message

QUANTIZE_ENV = Path(__file__).resolve().parent.parent / ".venv-quantize"
HANDED_OVER = "NUMPREC_QUANTIZE_HANDED_OVER"  # set for the quantization environment's process
FORMATS = ("compressed-tensors", "autoawq")
CALIBRATION_TASKS = ("add", "iter_add:3", "mul")
GROUP_SIZE = Bound(8, 4096, "a group spans at most one row of weights; GPTQ and AWQ use 32-128")
CALIBRATION = Bound(1, 16_384, "llm-compressor's AWQ/GPTQ recipes calibrate on 128-512 samples")


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


def recipe(method: str, bits: int, group_size: int):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    scheme = QuantizationScheme(
        targets=["Linear"],
        weights=QuantizationArgs(
            num_bits=bits, type="int", symmetric=method == "gptq", strategy="group", group_size=group_size
        ),
    )
    # The tied lm_head/embedding stays in the model's dtype, as in the paper's AWQ int4 checkpoint.
    groups = {"config_groups": {"group_0": scheme}, "ignore": ["lm_head"]}
    if method == "gptq":
        from llmcompressor.modifiers.quantization import GPTQModifier

        return [GPTQModifier(**groups)]
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier

    return [AWQModifier(duo_scaling="both"), QuantizationModifier(**groups)]


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
    description moves this one to i of n."""
    import tqdm as tqdm_module

    from harness.core.quiet import verbose

    if verbose():
        yield
        return
    own = tqdm_module.tqdm(total=None, desc=description, unit="layer group", file=sys.stderr, disable=False)
    original = tqdm_module.tqdm.__init__

    def quiet_init(bar, *args, **kwargs):
        match = re.match(r"\((\d+)/(\d+)\): Calibrating", str(kwargs.get("desc", "")))
        if match:
            own.total = int(match[2])
            own.update(int(match[1]) - 1 - own.n)
        original(bar, *args, **{**kwargs, "disable": True})

    tqdm_module.tqdm.__init__ = quiet_init
    try:
        yield
        if own.total:
            own.update(own.total - own.n)
    finally:
        tqdm_module.tqdm.__init__ = original
        own.close()


def quantize(
    model_name: str,
    method: str,
    bits: int,
    group_size: int,
    out: Path,
    samples: int,
    seed: int,
    model_path: str | None = None,
) -> dict:
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_model(model_name)
    source = resolve_weights(model, model_path)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(source)
    calibration = calibration_dtype()
    network = AutoModelForCausalLM.from_pretrained(source, dtype=getattr(torch, calibration))
    texts = calibration_texts(tokenizer, samples, seed)
    dataset = Dataset.from_dict(tokenizer(texts, add_special_tokens=False))
    if method == "awq":
        cpu_pinned_memory_workaround()
    started = time.perf_counter()
    with calibration_progress(f"calibrating {model_name} ({method})"):
        oneshot(
            model=network,
            dataset=dataset,
            recipe=recipe(method, bits, group_size),
            max_seq_length=max(len(ids) for ids in dataset["input_ids"]),
            num_calibration_samples=len(texts),
        )
        seconds = time.perf_counter() - started
        network.to(torch.bfloat16)  # the checkpoint's dtype (scales, embedding), whatever the calibration ran in
        staging = out.with_name(out.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        network.save_pretrained(staging, save_compressed=True)
    tokenizer.save_pretrained(staging)
    info = {
        "model": model_name,
        "source": str(source),
        "method": method,
        "bits": bits,
        "group_size": group_size,
        "calibration_samples": len(texts),
        "calibration_tasks": list(CALIBRATION_TASKS),
        "calibration_dtype": calibration,
        "seed": seed,
        "seconds": round(seconds, 1),
        "versions": _versions("llmcompressor", "compressed-tensors", "transformers", "torch"),
    }
    (staging / "numprec_quantize.json").write_text(json.dumps(info, indent=2) + "\n")
    follow_umask(staging)
    if out.exists():
        shutil.rmtree(out)
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


def check_group_size(model: ModelSpec, group_size: int, model_path: str | None = None) -> None:
    """Groups must tile every quantized row; llm-compressor would find out only after loading the model."""
    if group_size < 1:
        raise UserError(f"--group-size must be positive, got {group_size}")
    local = model_path or model.kind != "hub"
    config_path = Path(resolve_weights(model, model_path)) / "config.json" if local else None
    if config_path is None or not config_path.is_file():
        return
    config = json.loads(config_path.read_text(encoding="utf-8"))
    widths = {config.get("hidden_size"), config.get("intermediate_size")} - {None}
    bad = sorted(width for width in widths if width % group_size)
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
    python = QUANTIZE_ENV / "bin" / "python"
    if not python.exists():
        raise UserError(
            "llm-compressor is not installed here (it pins an older transformers); "
            "run: bash scripts/setup_quantize.sh, then repeat this command"
        )
    path = os.pathsep.join([str(QUANTIZE_ENV.parent), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, **{HANDED_OVER: "1"})
    return subprocess.call([str(python), "-m", "harness.quantize", *argv], env=env)


def calibration_argv(args, group_size: int, calibrated: Path, model_path: str | None) -> list[str]:
    """This command's arguments for the quantization environment: the calibration alone, into ``calibrated``, in
    compressed-tensors format (a conversion to AutoAWQ is done here afterwards)."""
    argv = ["--model", args.model, "--method", args.method, "--bits", str(args.bits)]
    argv += ["--group-size", str(group_size), "--samples", str(args.samples), "--seed", str(args.seed)]
    argv += ["--out", str(calibrated), "--format", "compressed-tensors"]
    return argv + (["--model-path", model_path] if model_path else [])


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.quantize", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="a model from harness/models.yaml (default: smollm2)")
    parser.add_argument("--method", required=True, choices=sorted(W4_PRECISIONS))
    parser.add_argument("--bits", type=int, default=4, help="weight bits (W4A16: 4)")
    parser.add_argument(
        "--group-size", type=GROUP_SIZE.arg, help="weights per quantization group (default: the registry's)"
    )
    parser.add_argument("--samples", type=CALIBRATION.arg, default=256, help="calibration problems (default 256)")
    parser.add_argument("--seed", type=SEED.arg, default=0)
    parser.add_argument(
        "--model-path",
        type=input_path,
        help="quantize the weights in this directory instead (a fine-tuned or merged checkpoint of --model; needs "
        "--out)",
    )
    parser.add_argument("--out", type=output_dir, help="checkpoint directory (default: where harness.eval looks)")
    parser.add_argument(
        "--format", choices=FORMATS, help="checkpoint format (default: autoawq for awq, compressed-tensors for gptq)"
    )
    args = parser.parse_args(argv)
    model = get_model(args.model)
    precision = get_precision(model, W4_PRECISIONS[args.method])
    if args.bits != precision.weight_bits:
        raise UserError(f"--bits {args.bits}: the registered {precision.name} precision stores {precision.weight_bits}")
    group_size = args.group_size if args.group_size is not None else precision.group_size
    model_path = str(args.model_path) if args.model_path else None
    if model_path:
        if args.out is None:
            raise UserError(
                "--model-path needs --out DIR: the cache's checkpoint is the registry model's; evaluate yours with "
                "harness.eval --model-path DIR"
            )
        check_unquantized(model_path)
    check_group_size(model, group_size, model_path)
    out = args.out or quantized_dir(model, precision)
    check_checkpoint_out(out)
    if args.out is None and group_size != precision.group_size:
        raise UserError(
            f"--group-size {group_size} differs from {args.model}'s registered {precision.name} "
            f"(group {precision.group_size}); pass --out DIR and evaluate it with --model-path DIR"
        )
    if not os.environ.get(HANDED_OVER) and model.kind == "hub":
        resolve_weights(model, model_path)  # weights missing from this machine: said before anything is announced
    checkpoint_format = args.format or ("autoawq" if args.method == "awq" else "compressed-tensors")
    if checkpoint_format == "autoawq":
        if args.method != "awq":
            raise UserError("--format autoawq holds AWQ checkpoints; GPTQ is written as compressed-tensors")
        require_gptqmodel()  # the conversion packs with gptqmodel: fail now, not after the calibration
    # llm-compressor always writes compressed-tensors; AutoAWQ is a rewrite of the same codes afterwards.
    calibrated = out if checkpoint_format == "compressed-tensors" else out.with_name(out.name + ".compressed-tensors")
    # The checkpoint directory is replaced whole when it is done, so the writer's lock is on the folder holding it:
    # one quantization at a time per folder. In the quantization environment the main environment holds it.
    lock = None if os.environ.get(HANDED_OVER) else DirectoryLock(out.parent, command_line("harness.quantize", argv))
    try:
        try:
            import llmcompressor  # noqa: F401
        except ImportError:
            code = _hand_over(calibration_argv(args, group_size, calibrated, model_path))
            if code:
                return code
        else:
            what = f"{args.model} with {args.method} W{args.bits}A16 g{group_size}"
            print(f"quantizing {what} -> {calibrated}", file=sys.stderr)
            info = quantize(
                args.model, args.method, args.bits, group_size, calibrated, args.samples, args.seed, model_path
            )
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


if __name__ == "__main__":
    run(main)
