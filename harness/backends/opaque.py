"""Quantized linear layers as one opaque operator each inside a compiled decode step.

gptqmodel's GPU kernels for AWQ int4 (Marlin's above all) cannot be traced by dynamo: the Marlin op has no fake
(meta) implementation, and its Python wrapper looks the op up under a lock and borrows scratch buffers. Each such
layer breaks the compiled step's graph: about 450 breaks a step for an 8B model, so no single CUDA graph, a long
compile and a step bound by the host. Here each such layer's forward becomes one call of a custom operator,
``numprec::opaque_linear``, whose fake implementation says only the output's shape and dtype: dynamo and inductor
keep it as one node of a single graph, and the layer's own code (its kernel, its buffers) runs inside it, captured
with the rest of the step by the CUDA graph.

The operator finds its layer by a number, as a custom operator takes tensors and numbers only; the layers are held
weakly, so a model that is dropped is freed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

_LAYERS: weakref.WeakValueDictionary[int, torch.nn.Module] = weakref.WeakValueDictionary()


@torch.library.custom_op("numprec::opaque_linear", mutates_args=())
def opaque_linear(x: torch.Tensor, layer: int) -> torch.Tensor:
    """The layer's own forward on ``x``."""
    return _LAYERS[layer]._numprec_forward(x)


@opaque_linear.register_fake
def _opaque_linear_shape(x: torch.Tensor, layer: int) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], _LAYERS[layer].out_features))


def _call(layer: int, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.numprec.opaque_linear(x, layer)


def make_opaque(model: torch.nn.Module, accepts: Callable[[torch.nn.Module], bool]) -> int:
    """Make every module of ``model`` that ``accepts`` takes (and has ``out_features``) one opaque operator call;
    returns how many. A module made opaque before is left as it is."""
    count = 0
    for module in model.modules():
        if accepts(module) and hasattr(module, "out_features") and not hasattr(module, "_numprec_forward"):
            number = len(_LAYERS) and max(_LAYERS) + 1
            module._numprec_forward = module.forward
            _LAYERS[number] = module
            module.forward = lambda x, number=number: _call(number, x)
            count += 1
    return count


def is_gptqmodel_kernel(module: torch.nn.Module) -> bool:
    """A gptqmodel quantized linear layer (its GPU kernels are the ones dynamo cannot trace)."""
    return type(module).__module__.startswith("gptqmodel.nn_modules.qlinear")
