"""Part 4 of bench.run, memory: the peak RSS of an evaluation process (load and 16 problems) per precision."""

from __future__ import annotations

import json
from pathlib import Path

from bench.common import log
from bench.evaluation import run_engine

MEMORY_PRECISIONS = ("fp32", "bf16", "int8", "nf4", "gguf-q8_0", "gguf-q4_1", "gptq-w4")


def bench_memory(threads: int, batch_size: int, work: Path, problems: list[dict]) -> list[dict]:
    from harness.models import get_model, get_precision
    from harness.models.weights import quantized_dir

    subset = work / "memory-problems.json"
    subset.write_text(json.dumps(problems[:16]))
    rows = []
    for precision in MEMORY_PRECISIONS:
        spec = get_precision(get_model("smollm2"), precision)
        if spec.prequantized and not quantized_dir(get_model("smollm2"), spec).exists():
            log(f"memory: {precision} skipped (make it with python -m harness.quantize --method {spec.method})")
            continue
        result = run_engine("numprec", subset, work, precision, 1, threads, batch_size)
        rows.append(
            {
                "precision": precision,
                "peak_rss_mb": result["peak_rss_mb"],
                "footprint_mb": result["footprint_mb"],
                "seconds_16_problems": result["seconds"][0],
            }
        )
        log(f"memory {precision}: peak RSS {result['peak_rss_mb']:.0f} MB")
    return rows


def memory_markdown(rows: list[dict]) -> list[str]:
    lines = [
        "## Peak RSS of an evaluation process (load + 16 problems)",
        "",
        "| precision | peak RSS MB | model footprint MB |",
        "|---|---:|---:|",
    ]
    lines += [f"| {r['precision']} | {r['peak_rss_mb']:.0f} | {r['footprint_mb']:.0f} |" for r in rows]
    return [*lines, ""]
