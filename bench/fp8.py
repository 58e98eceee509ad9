"""FP8 matmuls against bfloat16, on the device (bench.run's ``fp8`` section; issue 50's GPU step).

The same random model (the 8B architecture on a GPU, the tiny one on a CPU, bf16) answers the quick grid's prompts
greedily three ways through numprec's transformers backend: in bfloat16; with every decoder linear layer rounded to
fp8-dynamic and run by ``torch._scaled_mm`` (cuBLASLt's FP8 tensor-core matmul on an H100); and with the same FP8
weights run as the CPU path runs them, compressed-tensors' quantize-dequantize (harness/backends/emulated.py). It
reports the FP8 kernel's tokens/s against bfloat16's (the goal on an H100: 1.3x or more at 256 rows) and how many
answers the kernel and the emulation share (they part only where float32 sums in another order flip a near tie).
"""

from __future__ import annotations

import time

from bench.common import log, median, quick_grid_problems
from bench.decode import header, random_llama


def _timed_generations(backend, prompts: list[str], budget: int, repeats: int, device: str):
    """(median tokens/s over ``repeats`` timed calls after a warm-up, the last call's outputs)."""
    from harness.backends import Sampling
    from scratch.training import synchronize

    greedy = Sampling.named("greedy")
    backend.generate(prompts, budget, greedy)  # warm-up: graphs are compiled apart from the timing
    rates, outputs = [], []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        generations = backend.generate(prompts, budget, greedy)
        synchronize(device)
        rates.append(sum(g.tokens for g in generations) / (time.perf_counter() - started))
        outputs = [g.text for g in generations]
    return median(rates), outputs


def bench_fp8(architecture: str, device: str, repeats: int, threads: int, rows: int = 256, budget: int = 16) -> dict:
    import torch

    from harness.backends.fp8_linear import KERNEL, has_fp8_matmul, round_to_fp8, set_emulated
    from harness.backends.hf import HFBackend
    from harness.models import get_model, get_precision

    torch.set_num_threads(threads)
    model, tokenizer = random_llama(architecture, device, "bf16")
    prompts = [p["prompt"] for p in quick_grid_problems(rows, tokenizer)]
    smollm2 = get_model("smollm2")
    bf16 = HFBackend.from_model(model, tokenizer, get_precision(smollm2, "bf16"), batch_size=rows)
    bf16_rate, bf16_outputs = _timed_generations(bf16, prompts, budget, repeats, device)
    layers = round_to_fp8(model)  # in place: the bfloat16 weights go, the FP8 codes and scales stay
    fp8 = HFBackend.from_model(model, tokenizer, get_precision(smollm2, "fp8-dynamic"), batch_size=rows)
    fp8_rate, kernel_outputs = _timed_generations(fp8, prompts, budget, repeats, device)
    set_emulated(model, True)
    emulated = HFBackend.from_model(model, tokenizer, get_precision(smollm2, "fp8-dynamic"), batch_size=rows)
    _, emulated_outputs = _timed_generations(emulated, prompts, budget, 1, device)
    set_emulated(model, False)
    results = {
        **header(architecture, device, "bf16", rows),
        "budget": budget,
        "fp8_layers": layers,
        "fp8_tensor_cores": has_fp8_matmul(device),
        "kernel": KERNEL,
        "bf16_tokens_per_s": bf16_rate,
        "fp8_tokens_per_s": fp8_rate,
        "fp8_over_bf16": fp8_rate / bf16_rate,
        "kernel_equals_emulation": sum(a == b for a, b in zip(kernel_outputs, emulated_outputs, strict=True)),
        "kernel_equals_bf16": sum(a == b for a, b in zip(kernel_outputs, bf16_outputs, strict=True)),
        "prompts": len(prompts),
    }
    log(
        f"fp8 {architecture} on {device}: {fp8_rate:.0f} tok/s against bf16's {bf16_rate:.0f} "
        f"({results['fp8_over_bf16']:.2f}x); {results['kernel_equals_emulation']} of {len(prompts)} answers as "
        "the emulation gives them"
    )
    return results


def fp8_markdown(result: dict) -> list[str]:
    where = "FP8 tensor cores" if result["fp8_tensor_cores"] else "no FP8 tensor cores (torch's CPU _scaled_mm)"
    return [
        f"## FP8 matmuls: random {result['architecture']} on {result['device']} ({result['device_name']}, {where}), "
        f"{result['rows']} prompts, {result['budget']} new tokens at most",
        "",
        f"{result['fp8_layers']} linear layers rounded to fp8-dynamic and run by {result['kernel']}.",
        "",
        "| bf16 tokens/s | fp8 tokens/s | fp8 / bf16 | answers as the emulation's | answers as bf16's |",
        "|---:|---:|---:|---:|---:|",
        f"| {result['bf16_tokens_per_s']:,.0f} | {result['fp8_tokens_per_s']:,.0f} | {result['fp8_over_bf16']:.2f}x "
        f"| {result['kernel_equals_emulation']} of {result['prompts']} | {result['kernel_equals_bf16']} of "
        f"{result['prompts']} |",
        "",
    ]
