"""The rotations a checkpoint declares, applied as it loads: QuIP's block Hadamard before GPTQ (``quip+gptq``).

llm-compressor's QuIPModifier rotates each linear layer: ``v`` multiplies the layer's input by a Hadamard block and
its weight's input side by the inverse, ``u`` the weight's output side and the layer's output by the inverse, so that
the layer computes what it did while its weights (and, for W4A4 formats, its inputs) are quantized in a basis where
outliers are spread over the block (Tseng et al., 2024; MR-GPTQ, Egiazarian et al., 2025, for MXFP4 and NVFP4). The
checkpoint stores the weights with their rotations fused in and declares the rotations in config.json's
``quantization_config.transform_config``; the rotations of the inputs and outputs are computed at run time.

transformers (5.23) does not apply a transform_config on load: it reads the rotated weights and leaves the layers'
inputs and outputs unrotated, so the model computes something else (the stored rotation matrices are reported as
unexpected keys). ``apply`` puts the run-time rotations on with compressed-tensors' own transform factory, as
llm-compressor put them on while calibrating: the model then computes bit for bit what llm-compressor's model in
memory computed (tests/harness/models/test_rotations.py). The weights' rotations are not applied again: they are in
the stored weights. Each matrix the checkpoint stores is checked against the factory's: a rotation numprec would
compute otherwise is one line, never a silently different model.
"""

from __future__ import annotations

from pathlib import Path

import torch

from harness.core.errors import UserError
from harness.models.checkpoints import quantization_config

RUN_TIME = ("input", "output")  # where a rotation is computed as the model runs; the weight ones are stored fused


def apply(model: torch.nn.Module, weights: str | Path) -> int:
    """Put the checkpoint's run-time rotations on ``model`` (loaded from ``weights``); the layers rotated (0 where the
    checkpoint declares none)."""
    declared = (quantization_config(weights) or {}).get("transform_config")
    if not declared:
        return 0
    from compressed_tensors.transform import TransformConfig
    from compressed_tensors.transform.factory.base import TransformFactory

    config = TransformConfig.model_validate(declared)
    for name, scheme in config.config_groups.items():
        run_time = [args for args in scheme.apply if args.location in RUN_TIME]
        if run_time:
            TransformFactory.from_scheme(scheme.model_copy(update={"apply": run_time}), name=name).apply_to_model(model)
    made = transforms(model, set(config.config_groups))
    check_stored(made, Path(weights))
    return len({name.rpartition(".")[0] for name in made})


def transforms(model: torch.nn.Module, schemes: set[str]) -> dict[str, torch.nn.Module]:
    """Each run-time transform of ``schemes`` on ``model``, by its name in the model."""
    names = {f"{scheme}_{location}" for scheme in schemes for location in RUN_TIME}
    return {name: module for name, module in model.named_modules() if name.rpartition(".")[2] in names}


def check_stored(made: dict[str, torch.nn.Module], weights: Path) -> None:
    """Each rotation matrix the checkpoint stores equals the one the factory made for that layer (``made``)."""
    from safetensors import safe_open

    for file in sorted(weights.glob("*.safetensors")):
        with safe_open(str(file), "pt") as stored:
            for key in stored.keys():  # noqa: SIM118 (a safetensors file is no mapping)
                name = key.removesuffix(".weight")
                if name in made and not torch.equal(stored.get_tensor(key).to(made[name].weight.dtype),
                                                    made[name].weight.cpu()):  # fmt: skip
                    raise UserError(
                        f"{weights}: the rotation {key} differs from the one compressed-tensors makes from its "
                        "transform_config; numprec would compute another model than the one quantized"
                    )
