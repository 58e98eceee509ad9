"""How a format's weights are rounded onto its grid: the rounding methods llm-compressor offers, each registered where
it is defined with the modifiers that make it (what a recipe of it holds, in order), whether it reads calibration
problems, and the settings it runs with (recorded in the checkpoint's note and every run's run.json).

Round to nearest (RTN) is data-free; GPTQ rounds column by column against the inputs' second moments (Frantar et al.,
2022); AWQ scales salient input channels before rounding (Lin et al., 2023); AutoRound learns each weight's rounding
by signed gradient descent on the block's output (Cheng et al., 2023). A precision's name carries its method where it
is not the format's own: ``nvfp4+gptq`` is NVFP4 rounded by GPTQ, ``nvfp4`` NVFP4 rounded to nearest.

>>> split_rounding("nvfp4+gptq"), split_rounding("mxfp4+quip+gptq"), split_rounding("nvfp4"), split_rounding("bf16")
(('nvfp4', 'gptq'), ('mxfp4', 'quip+gptq'), ('nvfp4', None), ('bf16', None))
>>> ROUNDINGS["awq"].modifiers, rounding_of_modifiers(["GPTQModifier"])
(('AWQModifier', 'QuantizationModifier'), 'gptq')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Rounding:
    name: str
    steps: tuple[tuple[str, Mapping], ...]  # (llm-compressor's modifier, its settings) in order; the last quantizes
    summary: str
    calibrates: bool = True

    @property
    def modifiers(self) -> tuple[str, ...]:
        return tuple(modifier for modifier, _ in self.steps)

    @property
    def settings(self) -> dict[str, dict]:
        """What each of its modifiers runs with, as recorded: {modifier: settings}."""
        return {modifier: dict(settings) for modifier, settings in self.steps}


ROUNDINGS: dict[str, Rounding] = {}


def register(method: Rounding) -> Rounding:
    ROUNDINGS[method.name] = method
    return method


def split_rounding(name: str) -> tuple[str, str | None]:
    """A precision's name (its KV cache suffix already off) as its format's name and the rounding it names, if any."""
    for method in sorted(ROUNDINGS, key=len, reverse=True):  # the longest first: quip+gptq before gptq
        if name.endswith(f"+{method}") and len(name) > len(method) + 1:
            return name[: -len(method) - 1], method
    return name, None


def rounding_of_modifiers(names: Sequence[str]) -> str | None:
    """The method a recipe's modifiers (class names, in order) round by, or None for a sequence numprec has none for."""
    return next((method.name for method in ROUNDINGS.values() if method.modifiers == tuple(names)), None)


GPTQ = {"block_size": 128, "dampening_frac": 0.01, "actorder": "static"}  # llm-compressor's defaults, recorded
register(Rounding("rtn", (("QuantizationModifier", {}),), "round to nearest, data-free", calibrates=False))
register(Rounding("gptq", (("GPTQModifier", GPTQ),), "GPTQ: column by column, the error carried by the Hessian"))
register(
    Rounding(
        "awq",
        (("AWQModifier", {"duo_scaling": "both", "n_grid": 20}), ("QuantizationModifier", {})),
        "AWQ: salient input channels scaled up, then round to nearest",
    )
)
# AutoRound's own default is 200 steps a block on GPUs; its "light" recipe's 50 keep a CPU calibration in minutes.
# torch.compile is off: on a CPU it compiles for longer than the steps run.
register(
    Rounding(
        "autoround",
        (("AutoRoundModifier", {"iters": 50, "enable_torch_compile": False}),),
        "AutoRound: each weight's rounding learnt by signed gradient descent on its block's output",
    )
)
# QuIP's block-Hadamard rotations, then GPTQ (Tseng et al., 2024; the lever MR-GPTQ, Egiazarian et al., 2025, found
# for MXFP4 and NVFP4): each Hadamard block as wide as the format's scale group (the recipe writes the group size in
# for GROUP_WIDE), deterministic, so that harness/models/rotations.py computes the same rotations on load.
GROUP_WIDE = "the format's group size"
QUIP = {"rotations": ["v", "u"], "transform_type": "hadamard", "transform_block_size": GROUP_WIDE}
register(
    Rounding(
        "quip+gptq",
        (("QuIPModifier", QUIP), ("GPTQModifier", GPTQ)),
        "QuIP's block-Hadamard rotations of each layer's inputs and outputs, then GPTQ",
    )
)
register(
    Rounding(
        "smoothquant+gptq",
        (("SmoothQuantModifier", {"smoothing_strength": 0.8}), ("GPTQModifier", GPTQ)),
        "SmoothQuant (activations' outliers moved into the weights), then GPTQ",
    )
)
