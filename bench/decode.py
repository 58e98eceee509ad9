"""Decoding speed against transformers generate() and against the device's memory roofline.

Two uses of one measurement (bench.run's sections):
- ``loop``: a tiny random Llama (2 x 64, the default model's tokenizer) on this machine: the loop's own
  overhead, since the model computes little.
- ``eval --device cuda``: a random-init model with Llama-3.1-8B's architecture (bf16, built in the run, never
  written to disk) with the default model's tokenizer: the engine at the size users run.

Both run numprec's transformers backend and transformers' generate() (its own sdpa attention) on the same
prompts (cells of the quick grid) and budgets, greedy and the paper's sampling, and measure the device's memory
copy rate in the same run: a decode step reads every weight once (the input embedding aside), so at batch B
the roofline is B x copy rate / weight bytes tokens per second. Rates are end to end (prompt processing
included), so their fraction of the roofline is conservative.
"""

from __future__ import annotations

import time

from bench.common import log, median, quick_grid_problems

ARCHITECTURES = {
    # hidden, intermediate, layers, heads, kv heads, tied embeddings
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
    "smollm2-135m": {  # the default model's architecture (SmolLM2-135M-Instruct)
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "tie_word_embeddings": True,
    },
    "llama-3.1-8b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
    },
}


_BENCHED: dict[tuple[str, str, str], tuple] = {}  # the benches' model per architecture, device and dtype


def random_llama(architecture: str, device: str, dtype_name: str, blocks: int | None = None):
    """(model, tokenizer): a Llama of ``architecture`` (its first ``blocks`` decoder blocks, where given), randomly
    initialised on ``device``, with the default model's tokenizer (its vocabulary sets the embedding size); a new one
    each call."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from harness.models.weights import default_tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(default_tokenizer_dir())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{**ARCHITECTURES[architecture], **({"num_hidden_layers": blocks} if blocks else {})},
    )
    torch.manual_seed(0)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its dtype: an 8B model never exists in float32
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def bench_model(architecture: str, device: str, threads: int, rows: int):
    """(model, backend, dtype, bytes of weights a decode step reads) for a bench: the random ``architecture`` on
    ``device`` (fp32 on a CPU, bf16 on a GPU) behind the transformers backend, batch ``rows``."""
    import torch

    from harness.backends.hf import HFBackend
    from harness.models import get_model, get_precision

    torch.set_num_threads(threads)
    dtype = "fp32" if device == "cpu" else "bf16"
    key = (architecture, device, dtype)
    # built once a process: the decode and cell benches of a run share it (an 8B model: a minute to build, 16 GB)
    if key not in _BENCHED:
        _BENCHED[key] = random_llama(architecture, device, dtype)
    model, tokenizer = _BENCHED[key]
    backend = HFBackend.from_model(model, tokenizer, get_precision(get_model("smollm2"), dtype), batch_size=rows)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    if embedding is not model.get_output_embeddings().weight:  # a step gathers B rows of it, not all of it
        weight_bytes -= embedding.numel() * embedding.element_size()
    return model, backend, dtype, weight_bytes


def header(architecture: str, device: str, dtype: str, rows: int) -> dict:
    """What every decode bench's result starts with."""
    import torch

    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    return {"architecture": architecture, "device": device, "device_name": name, "dtype": dtype, "rows": rows}


def copy_rate(device: str, megabytes: int = 1024, seconds: float = 1.0) -> float:
    """Bytes per second the device moves in a large tensor copy (each byte read once and written once)."""
    import torch

    from scratch.training import synchronize

    source = torch.empty(megabytes << 20, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)
    synchronize(device)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        target.copy_(source)
        count += 1
        if count % 8 == 0:
            synchronize(device)
    synchronize(device)
    return 2 * source.numel() * count / (time.perf_counter() - started)


def bench_decode(architecture: str, device: str, repeats: int, threads: int, rows: int = 256, budget: int = 32) -> dict:
    import torch

    from harness.backends import Sampling
    from harness.backends.shared_prefix import NAME as SHARED_PREFIX
    from scratch.training import synchronize

    model, backend, dtype, weight_bytes = bench_model(architecture, device, threads, rows)
    tokenizer = backend.tokenizer
    prompts = [p["prompt"] for p in quick_grid_problems(rows, tokenizer)]
    tokenizer.padding_side = "left"
    encoded = tokenizer(prompts, add_special_tokens=False, return_tensors="pt", padding=True).to(device)
    rate = copy_rate(device)
    roofline = rows * rate / weight_bytes
    log(f"decode {architecture} on {device}: copy {rate / 1e9:.0f} GB/s, {weight_bytes / 1e9:.2f} GB a step")
    results: dict = {
        **header(architecture, device, dtype, rows),
        "budget": budget,
        "threads": threads,
        "copy_bytes_per_s": rate,
        "weight_bytes_per_step": weight_bytes,
        "roofline_tokens_per_s": roofline,
    }
    for name in ("greedy", "paper"):
        sampling = Sampling.named(name)
        ours, theirs = [], []
        model.set_attn_implementation(SHARED_PREFIX)
        backend.generate(prompts, budget, sampling, seed=list(range(rows)))  # warm-up: compiling is timed apart
        for _ in range(repeats):
            model.set_attn_implementation(SHARED_PREFIX)
            synchronize(device)
            started = time.perf_counter()
            generations = backend.generate(prompts, budget, sampling, seed=list(range(rows)))
            synchronize(device)
            ours.append((sum(g.tokens for g in generations), time.perf_counter() - started))
            options = {"do_sample": False, "top_k": None, "top_p": None, "temperature": None}
            if sampling.do_sample:
                options = {"do_sample": True, "top_k": 50, "top_p": 0.95, "temperature": 0.1}
            model.set_attn_implementation("sdpa")  # transformers' own attention for generate()
            started = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(**encoded, max_new_tokens=budget, pad_token_id=backend.pad_id, **options)
            synchronize(device)
            produced = int((out[:, encoded["input_ids"].shape[1] :] != backend.pad_id).sum())
            theirs.append((produced, time.perf_counter() - started))
        model.set_attn_implementation(SHARED_PREFIX)
        speed = {
            key: median([tokens / seconds for tokens, seconds in runs])
            for key, runs in (("numprec", ours), ("transformers", theirs))
        }
        results[name] = {
            "numprec_tokens_per_s": speed["numprec"],
            "transformers_tokens_per_s": speed["transformers"],
            "speedup": speed["numprec"] / speed["transformers"],
            "numprec_roofline_fraction": speed["numprec"] / roofline,
            "numprec_tokens": ours[0][0],
            "transformers_tokens": theirs[0][0],
        }
        log(
            f"decode {name}: numprec {speed['numprec']:.0f} tok/s ({speed['numprec'] / roofline:.1%} of the "
            f"roofline), transformers {speed['transformers']:.0f} tok/s"
        )
    results["compile_seconds"] = sum(backend.compile_seconds.values())
    results["paper_vs_greedy"] = results["greedy"]["numprec_tokens_per_s"] / results["paper"]["numprec_tokens_per_s"]
    results["vocabulary_seconds"] = vocabulary_seconds(model, rows, budget, device, repeats)
    return results


def vocabulary_seconds(model, rows: int, steps: int, device: str, repeats: int) -> float:
    """Seconds that ``steps`` greedy steps at ``rows`` rows spend in the work every decode loop does whatever its
    design: the output head's rows x vocabulary logits and their argmax (timed alone, median of ``repeats``). With
    a small model and a large vocabulary this, not the loop, is most of a step, and it bounds any loop's speedup:
    at most generate()'s time over this."""
    import torch

    from scratch.training import synchronize

    head = model.get_output_embeddings()
    hidden = torch.randn(rows, 1, head.in_features, device=device, dtype=head.weight.dtype)
    times = []
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first warms up
            synchronize(device)
            started = time.perf_counter()
            for _ in range(steps):
                head(hidden)[:, -1, :].float().argmax(-1)
            synchronize(device)
            times.append(time.perf_counter() - started)
    return median(times[1:])


def decode_markdown(title: str, result: dict) -> list[str]:
    model = result.get("architecture") or result.get("model")  # older results name the model only
    where = f"{result.get('dtype', 'fp32')}) on {result.get('device', 'cpu')} ({result.get('device_name', 'cpu')}"
    lines = [
        f"## {title}: random {model} ({where}), {result['rows']} prompts at batch {result['rows']}, "
        f"{result['budget']} new tokens at most, {result['threads']} thread(s)",
        "",
    ]
    if "roofline_tokens_per_s" in result:
        lines += [
            f"Memory copy rate measured in the run: {result['copy_bytes_per_s'] / 1e9:,.0f} GB/s; a decode step reads "
            f"{result['weight_bytes_per_step'] / 1e9:.2f} GB of weights, so the roofline at batch {result['rows']} "
            f"is {result['roofline_tokens_per_s']:,.0f} tokens/s. The paper's sampling runs at "
            f"1/{result['paper_vs_greedy']:.2f} of greedy.",
            "",
        ]
    if "vocabulary_seconds" in result:
        greedy = result["greedy"]
        generate_seconds = greedy["transformers_tokens"] / greedy["transformers_tokens_per_s"]
        vocabulary = result["vocabulary_seconds"]
        lines += [
            f"Work every loop does, timed alone: {result['budget']} steps of the output head's {result['rows']} x "
            f"vocabulary logits and their argmax take {vocabulary:.2f} s, {vocabulary / generate_seconds:.0%} of "
            f"generate()'s greedy run ({generate_seconds:.2f} s); no decode loop can be more than "
            f"{generate_seconds / vocabulary:.1f}x faster than generate() greedy on this model and machine.",
            "",
        ]
    lines += [
        "| decoding | numprec tokens/s | transformers generate() tokens/s | numprec / generate() | of roofline |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("greedy", "paper"):
        r = result[name]
        fraction = f"{r['numprec_roofline_fraction']:.1%}" if "numprec_roofline_fraction" in r else ""
        lines.append(
            f"| {name} | {r['numprec_tokens_per_s']:,.0f} | {r['transformers_tokens_per_s']:,.0f} | "
            f"{r['speedup']:.1f}x | {fraction} |"
        )
    return [*lines, ""]


def cell_prompts(backend, rows: int) -> list[str]:
    """``rows`` problems of one cell of the quick grid (add, 2 digits), as harness.eval asks them: the few-shot
    prompt in the chat template, so that the batch shares its ~170-token prefix as the harness's batches do."""
    from harness.questions.problems import Task, generate
    from harness.questions.prompts import user_message

    return [backend.chat_prompt(user_message(problem)) for problem in generate(Task("add"), 10, 2, rows, seed=0)]


def cell_flops(model, prefix_tokens: int, suffix_tokens: int, rows: int) -> tuple[int, int]:
    """Matmul FLOPs of a cell's prefill (every token through the body once, the prefix once for all rows, the head
    for each row's last) and of one decode step (one token a row through the body and the head)."""
    head = model.get_output_embeddings().weight
    embedding = model.get_input_embeddings().weight
    body = sum(p.numel() for p in model.parameters()) - head.numel() - (0 if head is embedding else embedding.numel())
    prefill = 2 * body * (prefix_tokens + suffix_tokens) + 2 * head.numel() * rows
    return prefill, 2 * (body + head.numel()) * rows


def timed_steps(backend, call) -> float:
    """A decode step's seconds, each step timed itself (the clock read as its tokens reach the host, on the dynamic
    path): the median interval between steps, which a loaded machine lengthens but cannot make negative, as it can
    a difference of two separately timed calls."""
    backend.step_clock = []
    try:
        call()
        clock = backend.step_clock
    finally:
        backend.step_clock = None
    return median([later - earlier for earlier, later in zip(clock, clock[1:], strict=False)])


def steps_by_read_every(backend, timed_call, prefill: float, budget: int) -> dict[int, float]:
    """A decode step's seconds with the host reading the chosen tokens every 1, 4, 8 and 16 steps."""
    default, steps = backend.read_every, {}
    for every in (1, 4, 8, 16):
        backend.read_every = every
        steps[every] = (timed_call() - prefill) / (budget - 1)
    backend.read_every = default
    return steps


def bench_cell(architecture: str, device: str, repeats: int, threads: int, rows: int = 256, budget: int = 32) -> dict:
    """What the harness runs: one cell's batch through the transformers backend, after an untimed warm-up (its
    seconds, and the first compile's, reported apart). The prefill (budget 1) against the FLOP bound of the matmul
    rate measured here, each decode step against the weight-read floor of the copy rate measured here, and the
    whole call against the bound that counts the shared prefix once (prefix and suffixes at the FLOP bound, each
    step at the larger of the floor and its own FLOP bound: a CPU, or a GPU at a large batch, computes longer than
    it reads). Generation runs to the budget (a random model's text, read free-form) so every timed call
    takes the same steps; on a GPU, the static path's host reads every k steps are timed for several k."""
    import torch

    from harness.backends import Sampling
    from harness.questions.answers import FreeForm
    from scratch.training import measure_matmul_flops, synchronize

    model, backend, dtype, weight_bytes = bench_model(architecture, device, threads, rows)
    prompts, greedy, to_budget = cell_prompts(backend, rows), Sampling.named("greedy"), FreeForm(budget)
    ids, prefix, _ = backend.prepare(prompts, [budget] * rows)
    suffix_tokens = sum(len(row) - len(prefix) for row in ids)
    prefill_flops, step_flops = cell_flops(model, len(prefix), suffix_tokens, rows)
    matmul = measure_matmul_flops(torch.float32 if dtype == "fp32" else torch.bfloat16, device=device)
    rate = copy_rate(device)

    def call(steps: int) -> None:
        """One batch of ``steps`` new tokens a row from the prompts' token ids (tokenized once, before any timing:
        the host's tokenizer is no part of the prefill), its prefix computed again."""
        backend._prefixes.clear()  # each call pays for its prefix once, as a cell's first batch does
        shared = (ids, prefix, backend._prefix_cache(prefix))
        backend.generate_batch(shared, slice(0, rows), [steps] * rows, greedy, list(range(rows)), to_budget)

    def timed(steps: int) -> float:
        """Median seconds of ``call``."""
        seconds = []
        for _ in range(repeats):
            synchronize(device)
            started = time.perf_counter()
            call(steps)
            synchronize(device)
            seconds.append(time.perf_counter() - started)
        return median(seconds)

    started = time.perf_counter()
    call(budget)  # warm-up: compiles every shape timed below
    synchronize(device)
    first_call = time.perf_counter() - started
    prefill, whole = timed(1), timed(budget)
    step = timed_steps(backend, lambda: call(budget)) if not backend.static_decode else (whole - prefill) / (budget - 1)
    kv_bytes = kv_bytes_per_step(model.config, rows, max(len(row) - len(prefix) for row in ids), budget, dtype)
    floor, prefill_bound = (weight_bytes + kv_bytes) / rate, prefill_flops / matmul
    step_bound = max(floor, step_flops / matmul)  # a step reads the weights once and does its rows' FLOPs
    result = {
        **header(architecture, device, dtype, rows),
        "budget": budget,
        "prefix_tokens": len(prefix),
        "suffix_tokens": suffix_tokens,
        "first_call_s": first_call,
        "compile_s": sum(backend.compile_seconds.values()),
        "matmul_flops": matmul,
        "copy_bytes_per_s": rate,
        "prefill_s": prefill,
        "prefill_bound_s": prefill_bound,
        "decode_step_s": step,
        "kv_bytes_per_step": kv_bytes,
        "decode_floor_s": floor,
        "decode_flop_bound_s": step_flops / matmul,
        "call_s": whole,
        "call_bound_s": prefill_bound + (budget - 1) * step_bound,
        "static_decode": backend.static_decode,
        "read_every": backend.read_every,
    }
    if backend.static_decode:  # the host's reads: every step, and every few
        result["step_s_by_read_every"] = steps_by_read_every(backend, lambda: timed(budget), prefill, budget)
    log(
        f"cell {architecture} on {device}: prefill {prefill * 1e3:.1f} ms ({prefill_bound / prefill:.0%} of its FLOP "
        f"bound), decode step {step * 1e3:.2f} ms ({floor / step:.0%} of the weight-read floor), the call "
        f"{result['call_bound_s'] / whole:.0%} of its bound; first call {first_call:.1f} s"
    )
    return result


def kv_bytes_per_step(config, rows: int, width: int, budget: int, dtype: str, static: bool = True) -> float:
    """Bytes of KV cache a decode step reads, on average over a batch's steps: keys and values of every layer for
    each row's positions (the static path reads them in harness/backends/hf.py's buckets of the filled positions;
    ``static=False``: every position so far)."""
    from harness.backends.hf import BUCKET

    head = config.hidden_size // config.num_attention_heads
    per_position = 2 * config.num_hidden_layers * config.num_key_value_heads * head * (4 if dtype == "fp32" else 2)
    length = -(-(width + budget) // 64) * 64
    read = [min(length, -(-(width + s + 1) // BUCKET) * BUCKET) if static else width + s + 1 for s in range(budget)]
    return rows * per_position * sum(read) / len(read)


def cell_markdown(result: dict) -> list[str]:
    """The cell bench as bench.run's results.md shows it."""
    r = result
    lines = [
        f"## One cell as the harness runs it: random {r['architecture']} ({r['dtype']}) on {r['device']} "
        f"({r['device_name']}), {r['rows']} rows of add n=2, {r['budget']} new tokens",
        "",
        f"Shared prefix {r['prefix_tokens']} tokens, {r['suffix_tokens']} suffix tokens in all; matmul "
        f"{r['matmul_flops'] / 1e12:.2f} TFLOP/s and copy {r['copy_bytes_per_s'] / 1e9:,.0f} GB/s measured in the "
        f"run. The first call (not timed) took {r['first_call_s']:.1f} s, of which compiling {r['compile_s']:.1f} s.",
        "",
        "| part | measured | bound | of the bound |",
        "|---|---:|---:|---:|",
        f"| prefill (budget 1) | {r['prefill_s'] * 1e3:,.1f} ms | {r['prefill_bound_s'] * 1e3:,.1f} ms (FLOPs) | "
        f"{r['prefill_bound_s'] / r['prefill_s']:.0%} |",
        f"| a decode step | {r['decode_step_s'] * 1e3:,.2f} ms | "
        f"{r['decode_floor_s'] * 1e3:,.2f} ms (weights and KV read) | "
        f"{r['decode_floor_s'] / r['decode_step_s']:.0%} |",
        f"| a decode step | | {r['decode_flop_bound_s'] * 1e3:,.2f} ms (FLOPs) | "
        f"{r['decode_flop_bound_s'] / r['decode_step_s']:.0%} |",
        f"| the call ({r['budget']} tokens a row) | {r['call_s'] * 1e3:,.1f} ms | {r['call_bound_s'] * 1e3:,.1f} ms | "
        f"{r['call_bound_s'] / r['call_s']:.0%} |",
        "",
    ]
    if r.get("step_s_by_read_every"):
        steps = ", ".join(f"k={k}: {v * 1e3:.2f} ms" for k, v in r["step_s_by_read_every"].items())
        lines += [f"Decode step by how often the host reads the tokens: {steps}.", ""]
    return lines
