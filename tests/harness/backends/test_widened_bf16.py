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
from harness.core.machine import cpu_bf16_instructions, cpu_kind
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


@pytest.mark.cpu_kinds("avx2", "avx512", "avx512-bf16", "amx")
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


# Two bf16 logits that round to the same value or one or two bf16 steps apart (0.125 each in [16, 32), where this
# model's top logits lie): a near tie, which another order of sums may turn. A digit chosen with any margin is 8-9
# apart from the next.
NEAR_TIE = 0.5


def first_difference(backend: HFBackend, prompt: str, ours: str, theirs: str) -> tuple[int, int, int]:
    """Where two answers to ``prompt`` part: (the tokens they share, our next token, theirs)."""
    ours_ids, theirs_ids = (backend.tokenizer(t, add_special_tokens=False)["input_ids"] for t in (ours, theirs))
    shared = next((i for i, (a, b) in enumerate(zip(ours_ids, theirs_ids, strict=False)) if a != b), None)
    assert shared is not None, f"{ours!r} and {theirs!r} part where one ends: no tie between two tokens"
    return shared, ours_ids[shared], theirs_ids[shared]


def margin(backend: HFBackend, prompt: str, answer: str, shared: int, one: int, other: int) -> float:
    """How far apart ``backend``'s logits for the tokens ``one`` and ``other`` are after the prompt and the first
    ``shared`` tokens of ``answer``."""
    prompt_ids = backend.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = backend.tokenizer(answer, add_special_tokens=False)["input_ids"][:shared]
    with torch.inference_mode():
        logits = backend.model(torch.tensor([prompt_ids + answer_ids])).logits[0, -1].float()
    return abs(float(logits[one] - logits[other]))


@pytest.mark.cpu_kinds("avx2", "avx512", "avx512-bf16", "amx")
def test_the_widened_model_keeps_bf16_between_layers_and_parts_from_the_bf16_kernel_only_at_near_ties(
    native_and_widened,
):
    """The residual stream stays bfloat16 at every block, and the greedy answers are the bf16 kernel's but where a
    near tie turned. Every kind's bf16 kernel sums exact float32 products in float32, as float32's GEMM does, each in
    an order of its own (AVX2 and AVX-512 widen to float32's kernels, avx512_bf16 takes two products a step, AMX a
    tile), and float32's GEMM orders its sums by the instruction set too. Measured on one AMX CPU, its kernels held
    to AVX2 and to AVX-512 without bf16 (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS): 3 of 4
    answers agree, and 947 + 138 parts (1185 widened, 1085 native); natively on AMX 2 of 4 (1085 against 1185, and
    232 + 968), where both models' logits for the two digits lie 0-0.25 apart. So where an answer differs, the
    first token it differs by must be a near tie in both models: a widening that computed anything else (another
    rounding, a wrong weight) parts from the bf16 kernel where it is sure (products rounded to e4m3: 5 and 33 apart)."""
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
    here = cpu_kind()
    for prompt, our_answer, their_answer in zip(prompts, ours, theirs, strict=True):
        if our_answer == their_answer:
            continue
        shared, our_token, their_token = first_difference(widened, prompt, our_answer, their_answer)
        apart = [margin(m, prompt, our_answer, shared, our_token, their_token) for m in (widened, native)]
        assert max(apart) <= NEAR_TIE, (
            f"on this {here} CPU, {our_answer!r} (widened) against {their_answer!r} (bf16 kernel) part where the "
            f"models' logits lie {apart[0]:.3f} and {apart[1]:.3f} apart: not a near tie"
        )


@pytest.mark.cpu_kinds("avx2", "avx512", "avx512-bf16", "amx")
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


@pytest.mark.cpu_kinds("avx2", "avx512", "avx512-bf16", "amx")
def test_the_columns_say_which_kernel_ran_and_what_it_held(native_and_widened):
    native, widened = native_and_widened
    assert native.kernel == "torch.Linear" and native.matmul_precision == "bfloat16"
    assert widened.kernel == f"torch.Linear, {widened_bf16.WIDENED}"
    assert widened.matmul_precision == widened_bf16.MATMUL_PRECISION
    assert native.activation_dtype == widened.activation_dtype == "bfloat16"
    # the linear weights in float32, the bf16 embedding, and the head's own float32 copy
    assert widened.footprint_mb > 1.8 * native.footprint_mb


@pytest.mark.cpu_kinds("avx2", "avx512", "avx512-bf16", "amx")
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
