"""What a quantized checkpoint directory holds, read from its config.json before any weights load: its
quantization_config, the bits and groups it records, the precision a compressed-tensors one declares, and whether it
fits the precision a run asks of it (a 4-bit directory is never labelled fp32; a GPTQ calibration is never called
AWQ). Everything a user can get wrong here is one line saying what to do."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import UserError
from harness.core.files import read_json
from harness.models.formats import check_declared, declared_precision
from harness.models.mix import Mix, read_mix
from harness.models.registry import W4_PRECISIONS, PrecisionSpec


@dataclass(frozen=True)
class Checkpoint:
    """A --model-path directory, read once: its quantization_config, the registry precision that config declares
    (every layer in one format), or the mix its layers make."""

    path: Path
    quantization: dict | None
    declared: str | None
    mix: Mix | None

    @property
    def precision(self) -> str | None:
        """The precision its rows are labelled with: the declared one, or the mix's label."""
        return self.mix.label if self.mix else self.declared


def read_checkpoint(path: str | Path) -> Checkpoint:
    """What a checkpoint directory holds, read from config.json, the weights' headers and its recipe (a mix's layers
    resolved as compressed-tensors resolves them)."""
    config = quantization_config(path)
    # one config group can leave layers out beside lm_head (a recipe's ignore): a mix too, so every layer is read
    compressed = config and config.get("quant_method") == "compressed-tensors"
    return Checkpoint(
        Path(path), config, declared_precision(config), read_mix(Path(path), config) if compressed else None
    )


def quantization_config(path: str | Path) -> dict | None:
    """A checkpoint directory's quantization_config (None: unquantized, or no config.json there). A config.json
    transformers could not read is refused here, before any weights load."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    data = read_json(config, f"{path} is not a loadable model directory")
    if not isinstance(data.get("model_type"), str):
        raise UserError(f"{config} names no model_type; it is not a transformers config (fix it or pass another path)")
    quant = data.get("quantization_config")
    if quant is not None and not (isinstance(quant, dict) and isinstance(quant.get("quant_method"), str)):
        raise UserError(f"{config}: quantization_config must be a mapping with a quant_method, got {quant!r:.60}")
    return quant


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
            f"python -m harness.quantize {quantize_flag(precision)} wrote"
        )
    if precision.layer_formats:
        return  # a mix's precision is made from this checkpoint's own layers (models/mix.py)
    if precision.method == "compressed" or declared_precision(config) not in (None, "gptq-w4"):
        check_declared(str(path), config, precision)
        return
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


def quantize_flag(precision: PrecisionSpec) -> str:
    """How harness.quantize is told to make ``precision``: by its name (the formats) or its W4A16 method."""
    if precision.method == "compressed":
        return f"--precision {precision.weights_name}"
    return f"--method {precision.method}"


def check_unquantized(model_path: str | None) -> None:
    """A cast precision on a quantized checkpoint would label 4-bit weights fp32/bf16."""
    config = quantization_config(model_path) if model_path else None
    if config:
        declared = declared_precision(config)
        if not declared and config.get("quant_method") == "compressed-tensors":
            raise UserError(
                f"--model-path {model_path} is a compressed-tensors checkpoint whose layers hold several formats; "
                "evaluate it without --precision (each layer runs in its own)"
            )
        which = declared or ("awq-w4" if config.get("quant_method") == "awq" else "gptq-w4 or awq-w4")
        raise UserError(f"--model-path {model_path} is a quantized checkpoint; evaluate it with --precision {which}")
