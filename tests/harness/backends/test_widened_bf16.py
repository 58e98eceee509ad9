"""bf16 linear layers through the float32 GEMM (harness/backends/widened_bf16.py), forced on any CPU: the same
arithmetic as torch's bf16 kernel up to the order of its sums, bf16 everywhere between the layers, and said in the
kernel, matmul and footprint columns."""

from __future__ import annotations

from types import SimpleNamespace

import psutil
import pytest
import torch
import torch.nn.functional as F

from harness.backends import Sampling, shared_prefix, widened_bf16
from harness.backends.hf import HFBackend
from harness.core.errors import UserError
from harness.core.machine import cpu_bf16_instructions
from harness.models import get_model, get_precision
from harness.models.weights import resolve_weights
from harness.questions.answers import FIRST_LINE
from harness.questions.problems import Task
from tests.harness.helpers import assert_summed_in_another_order, prompts_for


def bf16_backend(monkeypatch, choice: str) -> HFBackend:
    monkeypatch.setenv("NUMPREC_BF16_GEMM", choice)
    model = get_model("smollm2-arith")
    return HFBackend(resolve_weights(model), get_precision(model, "bf16"), batch_size=8, threads=1)


@pytest.fixture(scope="module")
def native_and_widened():
    with pytest.MonkeyPatch.context() as monkeypatch:
        return bf16_backend(monkeypatch, "native"), bf16_backend(monkeypatch, "float32")


def layer_inputs(backend: HFBackend, prompt: str) -> dict[str, torch.Tensor]:
    """Each linear layer's bf16 input on a real prompt, as the native model computes it."""
    seen, hooks = {}, []

    def keep(name: str):
        def hook(module, args, output) -> None:
            seen.setdefault(name, args[0])

        return hook

    for name, module in backend.model.named_modules():
        if isinstance(module, torch.nn.Linear):
            hooks.append(module.register_forward_hook(keep(name)))
    ids = backend.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    try:
        with torch.inference_mode():
            backend.model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def test_each_widened_layer_is_the_bf16_kernel_but_for_the_order_of_its_sums(native_and_widened):
    """On the same bf16 input, every layer's output (all 211, the 49152-wide head included) is what torch's bf16
    kernel gives, or apart from it by one bf16 step (both sum exact float32 products in float32 and round once) plus
    what two float32 sums in other orders may differ by where they cancel (99.99% bit-equal on this prompt)."""
    native, widened = native_and_widened
    _, prompts = prompts_for(native, Task("add"), 3, 1, seed=2)
    inputs = layer_inputs(native, prompts[0])
    layers = dict(widened.model.named_modules())
    for name, module in native.model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        assert type(layers[name]) is widened_bf16.WidenedBf16Linear and layers[name].weight.dtype == torch.float32
        assert torch.equal(layers[name].weight, module.weight.float()), f"{name}: the copy holds the bf16 values"
        rows = inputs[name][:, -16:]  # the prompt's last 16 positions: the question and the answer's start
        with torch.inference_mode():
            ours, theirs = layers[name](rows), F.linear(rows, module.weight, module.bias)
        assert_summed_in_another_order(ours, theirs, rows, module.weight)
    assert len(inputs) == 211


def test_the_embedding_stays_bf16_and_its_tied_head_is_copied(native_and_widened):
    _, widened = native_and_widened
    embedding, head = widened.model.get_input_embeddings(), widened.model.get_output_embeddings()
    assert embedding.weight.dtype == torch.bfloat16 and head.weight.dtype == torch.float32
    assert torch.equal(head.weight, embedding.weight.float())
    assert widened_bf16.widened_layers(widened.model) == 211


def test_the_widened_model_keeps_bf16_between_layers_and_answers_as_the_bf16_kernel(native_and_widened):
    """The residual stream stays bfloat16 at every block; greedy answers agree with the bf16 kernel's (a near tie
    may go either way under another order of sums, so agreement is counted: 3 of 4 at least)."""
    native, widened = native_and_widened
    dtypes = set()

    def record(module, args, output):
        dtypes.add((output[0] if isinstance(output, tuple) else output).dtype)

    hooks = [block.register_forward_hook(record) for block in widened.model.model.layers]
    _, prompts = prompts_for(widened, Task("add"), 3, 4, seed=7)
    budget = FIRST_LINE.budget(Task("add"), 10, 3, widened.count_tokens)
    try:
        ours = [g.text for g in widened.generate(prompts, budget, Sampling.named("greedy"))]
    finally:
        for hook in hooks:
            hook.remove()
    theirs = [g.text for g in native.generate(prompts, budget, Sampling.named("greedy"))]
    assert dtypes == {torch.bfloat16}
    assert sum(a == b for a, b in zip(ours, theirs, strict=True)) >= 3, list(zip(ours, theirs, strict=True))


def test_a_decode_steps_attention_products_are_the_bf16_kernels_but_for_the_order_of_their_sums(
    native_and_widened, monkeypatch
):
    """The widened model's attention layers take a decoding step's products (queries by keys, scores by values,
    the shared prefix's and the rows' own) through float32's GEMM. On the steps of a real greedy batch, as the
    native model computes them, each output is the bf16 kernels' or apart by a bf16 step (what rounding the
    products once, after float32 sums in another order, may change), 99.9% bit-equal."""
    native, widened = native_and_widened
    attention = [m for m in widened.model.modules() if hasattr(m, "k_proj")]
    assert len(attention) == 30 and all(getattr(m, shared_prefix.FLOAT32_PRODUCTS, False) for m in attention)
    assert not any(getattr(m, shared_prefix.FLOAT32_PRODUCTS, False) for m in native.model.modules())
    steps, one_query = [], shared_prefix._one_query_over_the_prefix

    def recorded(*args):
        steps.append(args)
        return one_query(*args)

    monkeypatch.setattr(shared_prefix, "_one_query_over_the_prefix", recorded)
    _, prompts = prompts_for(native, Task("add"), 3, 8, seed=7)
    native.generate(prompts, FIRST_LINE.budget(Task("add"), 10, 3, native.count_tokens), Sampling.named("greedy"))
    assert len(steps) >= 30 and not any(args[-1] for args in steps), "the native model's steps, not widened"
    equal = total = 0
    for *args, _ in steps[::5]:
        ours, theirs = one_query(*args, True), one_query(*args, False)
        larger = torch.maximum(ours.double().abs(), theirs.double().abs())
        apart = (ours.double() - theirs.double()).abs()
        assert ours.dtype == torch.bfloat16 and (apart <= larger * 2**-6 + larger.max() * 2**-12).all()
        equal, total = equal + int((apart == 0).sum()), total + apart.numel()
    assert equal > 0.999 * total, f"{equal} of {total} equal"


def test_the_columns_say_which_kernel_ran_and_what_it_held(native_and_widened):
    native, widened = native_and_widened
    assert native.kernel == "torch.Linear" and native.matmul_precision == "bfloat16"
    assert widened.kernel == f"torch.Linear, {widened_bf16.WIDENED}"
    assert widened.matmul_precision == widened_bf16.MATMUL_PRECISION
    assert native.activation_dtype == widened.activation_dtype == "bfloat16"
    # the linear weights in float32, the bf16 embedding, and the head's own float32 copy
    assert widened.footprint_mb > 1.8 * native.footprint_mb


def test_the_cpu_decides_unless_told(monkeypatch):
    monkeypatch.delenv("NUMPREC_BF16_GEMM", raising=False)
    assert widened_bf16.wanted("cpu") == (not cpu_bf16_instructions())
    assert not widened_bf16.wanted("cuda")
    monkeypatch.setenv("NUMPREC_BF16_GEMM", "native")
    assert not widened_bf16.wanted("cpu")
    monkeypatch.setenv("NUMPREC_BF16_GEMM", "fp32")
    with pytest.raises(UserError, match="NUMPREC_BF16_GEMM='fp32' names no bf16 kernel; use one of native, float32"):
        widened_bf16.wanted("cpu")


def test_copies_that_would_not_fit_leave_the_bf16_kernel(monkeypatch):
    """Where the float32 copies would not fit in the memory available, the model keeps torch's bf16 kernel."""
    asked = []

    def little_memory():
        asked.append(True)
        return SimpleNamespace(available=2**20)

    monkeypatch.setattr(psutil, "virtual_memory", little_memory)
    backend = bf16_backend(monkeypatch, "float32")
    assert asked, "the memory was asked"
    assert backend.kernel == "torch.Linear" and widened_bf16.widened_layers(backend.model) == 0
