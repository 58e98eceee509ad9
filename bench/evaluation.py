"""The eval section of bench.run: the same problems of the quick grid through numprec's transformers backend,
lm-evaluation-harness's HF backend, vLLM's engine (where set-up made .venv-vllm) and numprec's llama.cpp backend,
each engine timed in a process of its own (bench/engines.py), rounds interleaved; answers compared with numprec's;
numprec's time against the FLOP bound of the work at the measured fp32 matrix-multiply rate."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.common import log, median, quick_grid_problems
from harness.backends.vllm import VLLM_ENV
from harness.questions.answers import FIRST_LINE


def run_engine(
    engine: str, problems_file: Path, work: Path, precision: str, repeats: int, threads: int, batch_size: int
) -> dict:
    out = work / f"{engine}-{precision}.json"
    command = [sys.executable, "-m", "bench.engines", "--engine", engine, "--precision", precision]
    command += ["--problems", str(problems_file), "--repeats", str(repeats), "--threads", str(threads)]
    command += ["--batch-size", str(batch_size)]
    command += ["--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{engine} {precision} failed:\n{result.stderr[-3000:]}")
    return json.loads(out.read_text())


ENGINES = ("numprec", "lm-eval", "vllm", "llamacpp")  # the eval section's engines, in the order they run


def bench_eval(
    count: int, repeats: int, threads: int, batch_size: int, work: Path, wanted: Sequence[str] = ENGINES
) -> dict:
    from transformers import AutoTokenizer

    from harness.models import get_model
    from harness.models.weights import resolve_weights
    from scratch.training import measure_matmul_flops

    problems = quick_grid_problems(count)
    problems_file = work / "problems.json"
    problems_file.write_text(json.dumps(problems))
    log(f"eval: {len(problems)} problems over {len({p['cell'] for p in problems})} cells, {repeats} rounds")
    engines = [("numprec", "fp32", "numprec"), ("lm-eval", "fp32", "lm-eval"), ("numprec", "gguf-q4_1", "llamacpp")]
    if (VLLM_ENV / "bin" / "python").exists():
        engines.insert(2, ("vllm", "fp32", "vllm"))
    elif "vllm" in wanted:
        log("eval: vLLM left out (no .venv-vllm: bash scripts/setup_vllm.sh makes it)")
    engines = [engine for engine in engines if engine[2] in wanted]
    rounds: dict[str, list[dict]] = {key: [] for _, _, key in engines}
    for round_index in range(repeats):  # interleaved, so load on the machine hits every engine alike
        for engine, precision, key in engines:
            result = run_engine(engine, problems_file, work, precision, 1, threads, batch_size)
            rounds[key].append(result)
            log(f"eval round {round_index + 1}: {key} {result['seconds'][0]:.1f} s")
    import torch

    torch.set_num_threads(threads)
    gemm = median([measure_matmul_flops(torch.float32, size=1024, seconds=1.0) for _ in range(3)])
    tokenizer = AutoTokenizer.from_pretrained(resolve_weights(get_model("smollm2")))
    summary: dict = {
        "problems": len(problems),
        "threads": threads,
        "batch_size": batch_size,
        "rounds": repeats,
        "gemm_fp32_flops": gemm,
    }
    for key, results in rounds.items():
        seconds = median([r["seconds"][0] for r in results])
        summary[key] = {
            "seconds": seconds,
            "seconds_all": [r["seconds"][0] for r in results],
            "prompts_per_s": len(problems) / seconds,
            "generated_tokens": results[0]["generated_tokens"],
            "tokens_per_s": results[0]["generated_tokens"] / seconds,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
            "footprint_mb": results[0]["footprint_mb"],
            "identical_to_numprec": sum(
                FIRST_LINE.answer_text(a) == FIRST_LINE.answer_text(b)
                for a, b in zip(rounds["numprec"][0]["outputs"], results[0]["outputs"], strict=True)
            ),
        }
    ours, theirs = rounds["numprec"][0]["outputs"], rounds["lm-eval"][0]["outputs"]
    same = [FIRST_LINE.answer_text(a) == FIRST_LINE.answer_text(b) for a, b in zip(ours, theirs, strict=True)]
    summary["identical_outputs"] = sum(same)
    summary["identical_outputs_of"] = len(same)
    summary["differing_examples"] = [
        {"cell": p["cell"], "numprec": a, "lm_eval": b}
        for p, a, b, s in zip(problems, ours, theirs, same, strict=True)
        if not s
    ][:5]
    pairs = [b["seconds"][0] / a["seconds"][0] for a, b in zip(rounds["numprec"], rounds["lm-eval"], strict=True)]
    summary["speedup_vs_lm_eval"] = median(pairs)
    summary["speedup_vs_lm_eval_all"] = pairs
    # FLOP-bound rate: every fed token (suffix + generated) costs 2 FLOPs per weight; each shared prefix once.
    flops = flops_of_work(problems, ours, tokenizer, batch_size)
    summary["flops_needed"] = flops
    summary["flop_bound_seconds"] = flops / gemm
    summary["fraction_of_flop_bound"] = (flops / gemm) / summary["numprec"]["seconds"]
    return summary


def flops_of_work(problems: list[dict], outputs: list[str], tokenizer, batch_size: int) -> float:
    """2 FLOPs per weight for every token the engine feeds: each generated token, each prompt's own suffix, and
    each distinct shared prefix once. harness.eval decodes a template's cells side by side (bench's numprec
    engine groups them the same way) and keeps a computed prefix, so a prefix is not paid per cell."""
    from transformers import AutoConfig

    from bench.engines import groups_like_harness_eval
    from harness.backends import feedable_prefix
    from harness.models import get_model
    from harness.models.weights import resolve_weights

    config = AutoConfig.from_pretrained(resolve_weights(get_model("smollm2")))
    d, ff, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = d // config.num_attention_heads * config.num_key_value_heads
    per_token = 2 * (layers * (2 * d * d + 2 * d * kv + 3 * d * ff) + d * config.vocab_size)
    ids = [tokenizer(problem["prompt"], add_special_tokens=False)["input_ids"] for problem in problems]
    fed = sum(len(tokenizer(output, add_special_tokens=False)["input_ids"]) for output in outputs)
    prefixes = set()
    for group in groups_like_harness_eval(problems, batch_size):
        prefix = feedable_prefix([ids[i] for i in group])
        prefixes.add(tuple(prefix))
        fed += sum(len(ids[i]) - len(prefix) for i in group)
    fed += sum(len(prefix) for prefix in prefixes)
    return per_token * fed


def eval_markdown(e: dict) -> list[str]:
    lines = [
        f"## Evaluation throughput ({e['problems']} problems of the quick grid, fp32 greedy, {e['threads']} "
        f"thread(s), batch size {e['batch_size']} for every engine, median of {e['rounds']} interleaved rounds)",
        "",
        "| engine | seconds | prompts/s | generated tokens/s | peak RSS MB | answers as numprec's |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    names = {
        "numprec": "numprec (transformers)",
        "lm-eval": "lm-eval HF generate_until",
        "vllm": "vLLM engine (--backend vllm)",
        "llamacpp": "numprec llama.cpp Q4_1",
    }
    for key, label in ((key, label) for key, label in names.items() if key in e):
        r = e[key]
        speed = f"{r['seconds']:.1f} | {r['prompts_per_s']:.2f} | {r['tokens_per_s']:.1f}"
        same = f"{r['identical_to_numprec']} of {e['problems']}" if "identical_to_numprec" in r else ""
        lines.append(f"| {label} | {speed} | {r['peak_rss_mb']:.0f} | {same} |")
    lines += [
        "",
        f"- **speedup_vs_lm_eval: {e['speedup_vs_lm_eval']:.2f}x** (per round: "
        + ", ".join(f"{x:.2f}" for x in e["speedup_vs_lm_eval_all"])
        + ")",
        f"- **identical_outputs: {e['identical_outputs']} of {e['identical_outputs_of']}** (answer lines)",
        f"- numprec runs at {e['fraction_of_flop_bound']:.1%} of the FLOP-bound rate: the work needs "
        f"{e['flops_needed'] / 1e12:.2f} TFLOP, {e['flop_bound_seconds']:.1f} s at the measured fp32 GEMM rate "
        f"of {e['gemm_fp32_flops'] / 1e9:.0f} GFLOP/s",
        "",
    ]
    return lines
