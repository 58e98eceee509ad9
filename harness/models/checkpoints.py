"""What a quantized checkpoint directory holds, read from its config.json before any weights load: its
quantization_config, the bits and groups it records, the precision a compressed-tensors one declares, and whether it
fits the precision a run asks of it (a 4-bit directory is never labelled fp32; a GPTQ calibration is never called
AWQ). Everything a user can get wrong here is one line saying what to do."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import UserError
from harness.core.files import read_json
from harness.models.formats import check_declared, declared_precision
from harness.models.mix import Mix, read_mix
from harness.models.recipe_files import recorded_recipes, recorded_rounding
from harness.models.registry import W4_PRECISIONS, PrecisionSpec, rounded_name
from harness.models.stored_bits import read_safetensors_header

PROVENANCE = "numprec_quantize.json"  # what harness.quantize leaves beside the weights it wrote


@dataclass(frozen=True)
class Checkpoint:
    """A model directory, read once where it enters (read_checkpoint): config.json, its quantization_config, every
    tensor's dtype and shape from the weights' headers, the note harness.quantize leaves; and what these declare,
    a registry precision or a mix. The checks below are functions of this value: nothing reads the directory again."""

    path: Path
    config: Mapping
    quantization: dict | None
    tensors: Mapping[str, dict]  # name -> {"dtype", "shape"}, over every safetensors shard the directory names
    provenance: Mapping  # numprec_quantize.json ({} where there is none)
    declared: str | None  # the precision its quantization_config declares, named with the rounding its recipe says
    mix: Mix | None

    @property
    def precision(self) -> str | None:
        """The precision its rows are labelled with: the declared one, or the mix's label."""
        return self.mix.label if self.mix else self.declared

    @property
    def method(self) -> str | None:
        """The method harness.quantize calibrated with, as its note says."""
        method = self.provenance.get("method")
        return method if isinstance(method, str) else None


def read_checkpoint(path: str | Path) -> Checkpoint:
    """A directory transformers can load, read once: a readable config.json of an architecture transformers knows,
    a well-formed quantization_config, and weights beside it whose headers read (safetensors files, or an index whose
    weight map names files that are there); a mix's layers resolved as compressed-tensors resolves them. Whatever is
    wrong is one line."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise UserError(f"--model-path {path} is not a model directory (no config.json there)")
    config = read_json(path / "config.json", f"{path} is not a loadable model directory")
    quantization = _quantization(config, path / "config.json")
    from transformers import CONFIG_MAPPING

    if config["model_type"] not in CONFIG_MAPPING:
        architecture = config["model_type"]
        raise UserError(f"{path}/config.json: model_type {architecture!r} is no architecture transformers knows")
    tensors: dict[str, dict] = {}
    for shard in _shards(path):
        tensors.update(read_safetensors_header(path / shard))
    provenance = _provenance(path)
    recipes = recorded_recipes(path, provenance)
    rounding = recorded_rounding(recipes, provenance)
    # one config group can leave layers out beside lm_head (a recipe's ignore): a mix too, so every layer is read
    compressed = quantization and quantization.get("quant_method") == "compressed-tensors"
    mix = read_mix(path, config, quantization, tensors, recipes, rounding) if compressed else None
    declared = declared_precision(quantization)
    declared = rounded_name(declared, rounding) if declared else None
    return Checkpoint(path, config, quantization, tensors, provenance, declared, mix)


def _quantization(config: dict, where: Path) -> dict | None:
    """A config.json's quantization_config, its shape checked (None: unquantized)."""
    if not isinstance(config.get("model_type"), str):
        raise UserError(f"{where} names no model_type; it is not a transformers config (fix it or pass another path)")
    quant = config.get("quantization_config")
    if quant is not None and not (isinstance(quant, dict) and isinstance(quant.get("quant_method"), str)):
        raise UserError(f"{where}: quantization_config must be a mapping with a quant_method, got {quant!r:.60}")
    return quant


def _shards(path: Path) -> list[str]:
    """The safetensors files a model directory's weights are in (none where they are pytorch_model*.bin)."""
    index = next(path.glob("*.safetensors.index.json"), None)
    if index is not None:
        weight_map = read_json(index, f"{index} is not a safetensors index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise UserError(f"{index} has no weight_map; it cannot say where the weights are")
        return sorted({str(name) for name in weight_map.values()})
    shards = sorted(item.name for item in path.glob("*.safetensors"))
    if not shards and not next(path.glob("pytorch_model*.bin"), None):
        raise UserError(f"{path} has a config.json but no weights (*.safetensors or pytorch_model.bin)")
    return shards


def _provenance(path: Path) -> Mapping:
    """The note harness.quantize leaves beside the weights ({} where there is none, or none readable)."""
    note = path / PROVENANCE
    try:
        found = json.loads(note.read_text(encoding="utf-8")) if note.is_file() else {}
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def quantization_config(path: str | Path) -> dict | None:
    """A directory's quantization_config, for the tools that look at one directory once (None: unquantized, or no
    config.json there)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    return _quantization(read_json(config, f"{path} is not a loadable model directory"), config)


def check_quantized_checkpoint(checkpoint: Checkpoint, precision: PrecisionSpec) -> None:
    """A GPTQ/AWQ precision must load a checkpoint that really is 4-bit: no fp32 directory under a w4 label."""
    path, config = checkpoint.path, checkpoint.quantization
    if not config:
        raise UserError(
            f"{path} holds an unquantized checkpoint, not {precision.name}; pass the directory "
            f"python -m harness.quantize {quantize_flag(precision)} wrote"
        )
    if precision.layer_formats:
        return  # a mix's precision is made from this checkpoint's own layers (models/mix.py)
    if precision.method == "compressed" or checkpoint.declared not in (None, "gptq-w4"):
        check_declared(str(path), checkpoint.declared, config, precision)
        return
    recorded = quantization_summary(config)
    if recorded.get("bits") not in (None, precision.weight_bits):
        raise UserError(f"{path} is a {recorded['bits']}-bit checkpoint, not {precision.name}")
    # The label names the method: AWQ checkpoints are AutoAWQ files; a GPTQ calibration is never called AWQ.
    method = checkpoint.method or ("awq" if config.get("quant_method") == "awq" else None)
    if precision.method == "awq" and config.get("quant_method") != "awq":
        raise UserError(
            f"{path} is not in AutoAWQ format (quant_method {config.get('quant_method')}), which awq-w4 loads "
            "through gptqmodel; write AWQ checkpoints with python -m harness.quantize --method awq (--format autoawq)"
        )
    if method is not None and method != precision.method:
        other = W4_PRECISIONS.get(method, method)
        raise UserError(f"{path} was calibrated with {method}, not {precision.method}; use --precision {other}")


def check_transformers_can_read(checkpoint: Checkpoint) -> None:
    """transformers 5.23 with compressed-tensors 0.19 cannot load an asymmetric (zero-point) compressed-tensors
    checkpoint: it packs the zero points and then rejects their shape (seen with llm-compressor's AWQ output).
    AutoAWQ's format holds the same codes and loads through gptqmodel."""
    config = checkpoint.quantization
    if not config or config.get("quant_method") != "compressed-tensors":
        return
    groups = (config.get("config_groups") or {}).values()
    if any(not (group.get("weights") or {}).get("symmetric", True) for group in groups):
        raise UserError(
            f"{checkpoint.path} is an asymmetric compressed-tensors checkpoint, which transformers cannot load; "
            "write it in AutoAWQ format (python -m harness.quantize --method awq, the default --format autoawq)"
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


def quantize_flag(precision: PrecisionSpec) -> str:
    """How harness.quantize is told to make ``precision``: by its name (the formats) or its W4A16 method."""
    if precision.method == "compressed":
        return f"--precision {precision.weights_name}"
    return f"--method {precision.method}"


def check_unquantized(checkpoint: Checkpoint | None) -> None:
    """A cast precision on a quantized checkpoint would label 4-bit weights fp32/bf16."""
    config = checkpoint.quantization if checkpoint else None
    if config:
        declared = checkpoint.declared
        if not declared and config.get("quant_method") == "compressed-tensors":
            raise UserError(
                f"--model-path {checkpoint.path} is a compressed-tensors checkpoint whose layers hold several "
                "formats; evaluate it without --precision (each layer runs in its own)"
            )
        which = declared or ("awq-w4" if config.get("quant_method") == "awq" else "gptq-w4 or awq-w4")
        raise UserError(
            f"--model-path {checkpoint.path} is a quantized checkpoint; evaluate it with --precision {which}"
        )


DIGESTED = ("*.safetensors", "config.json", "tokenizer*.json", "*.jinja")  # what a checkpoint computes with


def checkpoint_digest(path: str | Path) -> str:
    """A digest of what a checkpoint directory computes with: its weights, config, tokenizer and chat template (not
    the notes beside them). Two directories of one name made at other times, or by other code, differ in it; a result
    computed from one is not the other's."""
    digest = hashlib.sha256()
    files = sorted({found for pattern in DIGESTED for found in Path(path).glob(pattern) if found.is_file()})
    for found in files:
        digest.update(found.name.encode() + b"\0")
        with open(found, "rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()[:16]
