"""One evaluation engine, timed in a process of its own (so its peak RSS is its own):

    python -m bench.engines --engine numprec|lm-eval|vllm --problems FILE --out FILE [--precision P]

Reads the prompts bench.run wrote (already chat-templated: every engine gets the same strings), generates
greedily with the cell's token budget, and writes the outputs, the seconds of each timed pass (model loading
excluded) and the peak RSS (with vLLM's, whose engine is a child process: the sum of both). The stop rule is the
harness's, first non-blank line (vLLM's is the same backend loop's); lm-eval's ``until: ["\\n"]`` is the closest it
can express (bench.run compares the answer lines).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import harness  # noqa: F401  (thread settings before torch loads)
from harness.backends import Sampling, load_backend
from harness.core.bounds import BATCH_SIZE, REPEATS, THREADS
from harness.core.cli import ArgParser, input_path, output_file, run
from harness.core.errors import UserError
from harness.models import get_model, get_precision
from harness.models.weights import variant_weights


def peak_rss_mb(process: str = "self") -> float:
    """A process's own high-water resident set (VmHWM), this one's by default. getrusage's ru_maxrss is not enough:
    it keeps the parent's peak across fork and exec, so a child of a big parent reports the parent's figure."""
    for line in Path(f"/proc/{process}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def engine_rss_mb(backend) -> float:
    """The peak RSS of a backend's engine process where it has one (vLLM's), else 0."""
    engine = getattr(backend, "engine", None)
    return peak_rss_mb(str(engine.process.pid)) if engine is not None else 0.0


BACKENDS = {"numprec": None, "vllm": "vllm"}  # bench.engines' engines behind numprec's loop, by backend


def groups_like_harness_eval(problems: list[dict], batch_size: int) -> list[list[int]]:
    """Problem indices grouped as harness.eval groups cells (plan_groups): consecutive cells of one prompt
    template, as many whole cells as fit in a batch."""
    cells: dict[str, list[int]] = defaultdict(list)
    for index, problem in enumerate(problems):
        cells[problem["cell"]].append(index)
    groups: list[list[int]] = []
    last_template = None
    for indices in cells.values():
        template = problems[indices[0]]["template"]
        if groups and template == last_template and len(groups[-1]) + len(indices) <= batch_size:
            groups[-1].extend(indices)
        else:
            groups.append(list(indices))
        last_template = template
    return groups


def numprec_engine(problems: list[dict], precision_name: str, batch_size: int, backend_name: str | None = None):
    """numprec's own engine (hf, or llamacpp for a gguf precision), or ``backend_name`` (vllm) behind the same
    loop."""
    model = get_model("smollm2")
    precision = get_precision(model, precision_name)
    weights = variant_weights(model, precision)
    backend = load_backend(backend_name or precision.backend or "hf", weights, precision, None, batch_size)

    def generate() -> list[tuple[str, int]]:
        getattr(backend, "_prefixes", {}).clear()  # every pass pays for its prefixes, as a fresh run would
        outputs: list[tuple[str, int] | None] = [None] * len(problems)
        for indices in groups_like_harness_eval(problems, batch_size):
            prompts = [problems[i]["prompt"] for i in indices]
            budgets = [problems[i]["max_new_tokens"] for i in indices]
            for i, g in zip(indices, backend.generate(prompts, budgets, Sampling.named("greedy")), strict=True):
                outputs[i] = (g.text, g.tokens)
        return outputs  # type: ignore[return-value]

    return generate, backend


def lm_eval_engine(problems: list[dict], batch_size: int):
    """lm-evaluation-harness's Hugging Face backend, asked for generate_until on the very same strings."""
    import torch
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    weights = variant_weights(get_model("smollm2"), get_precision(get_model("smollm2"), "fp32"))
    lm = HFLM(pretrained=weights, backend="causal", dtype=torch.float32, device="cpu", batch_size=batch_size)
    requests = [
        Instance(
            request_type="generate_until",
            doc={},
            arguments=(p["prompt"], {"until": ["\n"], "max_gen_toks": p["max_new_tokens"], "do_sample": False}),
            idx=i,
        )
        for i, p in enumerate(problems)
    ]

    def generate() -> list[tuple[str, int]]:
        texts = lm.generate_until(requests, disable_tqdm=True)
        return [(text, len(lm.tok_encode(text))) for text in texts]

    return generate, lm.model.get_memory_footprint() / 2**20


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m bench.engines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", required=True, choices=["numprec", "lm-eval", "vllm"])
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--problems", type=input_path, required=True)
    parser.add_argument("--repeats", type=REPEATS.arg, default=1)
    parser.add_argument("--batch-size", type=BATCH_SIZE.arg, default=256)
    parser.add_argument("--threads", type=THREADS.arg, default=1)
    parser.add_argument("--out", type=output_file, required=True)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    problems = json.loads(args.problems.read_text())
    backend = None
    if args.engine in ("numprec", "vllm"):
        generate, backend = numprec_engine(problems, args.precision, args.batch_size, BACKENDS[args.engine])
        footprint = backend.footprint_mb
    elif args.precision != "fp32":
        raise UserError("the lm-eval engine runs fp32 only")
    else:
        generate, footprint = lm_eval_engine(problems, args.batch_size)
    seconds, outputs = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        outputs = generate()
        seconds.append(time.perf_counter() - started)
    result = {
        "engine": args.engine,
        "precision": args.precision,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "seconds": seconds,
        "outputs": [text for text, _ in outputs],
        "generated_tokens": sum(tokens for _, tokens in outputs),
        "footprint_mb": footprint,
        "peak_rss_mb": peak_rss_mb() + engine_rss_mb(backend),
        "kernel": getattr(backend, "kernel", ""),
    }
    args.out.write_text(json.dumps(result) + "\n")
    print(f"{args.engine} {args.precision}: {min(seconds):.1f} s per pass", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run(main)
