"""Speed and memory of numprec against its peers, measured side by side in one run on this machine.

    python -m bench.run --out reports/bench            # everything (~30-40 min on 2 cores)
    python -m bench.run --out /tmp/b --only data,train --repeats 2

Writes DIR/results.json and DIR/results.md. Shared machines are noisy: every figure is the median of
``--repeats`` passes, and every ratio is taken between passes run back to back in this one run.

1. eval    the same problems (cells of the quick grid), default model, fp32, greedy, through numprec's
           transformers backend, lm-evaluation-harness's HF backend (generate_until, same strings, same
           budget), vLLM's engine (--backend vllm, where set-up made .venv-vllm) and llama.cpp (numprec's
           llamacpp backend on the shipped Q4_1 GGUF); identical answers counted against numprec's; numprec as a
           fraction of the FLOP-bound rate implied by the measured fp32 matrix-multiply speed.
           ``--device cuda``: a random-init Llama-3.1-8B architecture (bf16) instead, numprec against
           generate(), greedy and paper sampling, as a fraction of the memory roofline (bench/decode.py).
2. train   scratch's training step at the paper's shapes, alone and packed, per precision: steps/s, MFU against
           the matmul rate measured in the same run, data generation's share, projected hours of the paper grid
           (bench/train.py; ``--device cuda`` for a GPU, ``--quick`` for one shape per precision).
3. data    problems/s of the harness and scratch generators against a per-sample Python loop.
4. memory  peak RSS of an evaluation process per precision.
5. loop    the decode loop's own overhead: a tiny random Llama (the default model's tokenizer) generating for
           the same 256 prompts at batch 256, numprec's backend against transformers' generate(), greedy and the
           paper's sampling, generated tokens per second, the memory roofline, and the time of the work every
           loop does (the output head's logits and their argmax), which bounds any loop's speedup (bench/decode.py).
6. api     the quick grid through llama.cpp's server (the api backend) at concurrency 1 and 8, against the
           in-process llamacpp backend: prompts/s and the per-request overhead of HTTP (bench/api.py).
7. rundir  the bytes written to finish a run directory at the paper grid's shape against its files' size, and the
           wall time, through the scripted backend (bench/rundir.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import harness  # noqa: F401  (thread settings before torch loads)
from bench.api import api_markdown, bench_api
from bench.common import log, median, quick_grid_problems
from bench.decode import bench_cell, bench_decode, cell_markdown, decode_markdown
from bench.evaluation import bench_eval, eval_markdown, run_engine
from bench.rundir import bench_rundir, rundir_markdown
from bench.scoring import bench_scoring, scoring_markdown
from bench.train import bench_train, train_markdown
from harness.bounds import BATCH_SIZE, REPEATS, THREADS, Bound
from harness.cli import ArgParser, command_line, name_list, output_dir, run
from harness.errors import UserError
from harness.files import read_json
from harness.lock import DirectoryLock
from harness.problems import generate

SECTIONS = ("eval", "train", "data", "memory", "loop", "api", "rundir", "scoring")
PROBLEMS = Bound(1, 100_000, "timed passes over more problems only take longer; 200 give a stable rate")
MEMORY_PRECISIONS = ("fp32", "bf16", "int8", "nf4", "gguf-q8_0", "gguf-q4_1", "gptq-w4")


def device_name(text: str) -> str:
    """--device: cpu, cuda or cuda:N, which must be on this machine."""
    from scratch.numerics import resolve_device

    try:
        resolve_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


# ---------------------------------------------------------------- 1. evaluation throughput


# ---------------------------------------------------------------- 3. data generation


def paper_algorithm_python(count: int, length: int, operands: int, base: int, seed: int) -> list[tuple[str, str]]:
    """The paper's generator (Alg. 1) written the plain way: one sample at a time, one digit at a time."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        numbers = []
        for _ in range(operands):
            digits = [rng.randrange(base) for _ in range(length)]
            while len(digits) > 1 and digits[0] == 0:  # strip leading zeros
                digits.pop(0)
            numbers.append(int("".join(map(str, digits)), base))
        total = sum(numbers)
        out.append((" + ".join(str(n) for n in numbers), str(total)))
    return out


def bench_data(repeats: int, count: int = 100_000) -> list[dict]:
    from harness.problems import Task
    from scratch.data import Arithmetic, Problems

    cases = [("add", 2, 10, 10), ("iter_add", 3, 10, 10)]
    rows = []
    for name, operands, base, length in cases:
        task = Task(name, operands=operands)

        def numprec(task=task, base=base, length=length):
            generate(task, base, length, count, seed=0)

        scratch_problems = Problems(Arithmetic("add", base, length, operands, False), 0, 16)

        def scratch_batch(problems=scratch_problems):
            problems.train_batch(count)

        def plain(operands=operands, base=base, length=length):
            paper_algorithm_python(count, length, operands, base, 0)

        timings = {}
        for label, function in (("numprec", numprec), ("scratch", scratch_batch), ("python", plain)):
            seconds = []
            for _ in range(repeats):
                started = time.perf_counter()
                function()
                seconds.append(time.perf_counter() - started)
            timings[label] = count / median(seconds)
        rows.append(
            {
                "task": f"{name}:{operands} base {base} length {length}",
                "count": count,
                "numprec_problems_per_s": timings["numprec"],
                "scratch_problems_per_s": timings["scratch"],
                "python_problems_per_s": timings["python"],
                "numprec_vs_python": timings["numprec"] / timings["python"],
                "scratch_vs_python": timings["scratch"] / timings["python"],
            }
        )
        log(f"data {rows[-1]['task']}: numprec {timings['numprec']:,.0f}/s, python {timings['python']:,.0f}/s")
    return rows


# ---------------------------------------------------------------- 4. memory


def bench_memory(threads: int, batch_size: int, work: Path, problems: list[dict]) -> list[dict]:
    from harness.models import get_model, get_precision
    from harness.weights import quantized_dir

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


# ---------------------------------------------------------------- report


def machine() -> dict:
    """This machine as every record describes it (harness/machine.py), with a short line of its instructions."""
    from harness.machine import describe

    here = describe()
    return {**here, "instructions": cpu_instructions(here)}


def cpu_instructions(here: dict) -> str:
    """The vector instructions torch's CPU kernels use here, and whether the CPU has bf16 ones: machines of one
    name differ (an AVX2-only EPYC multiplies bf16 several times slower than fp32, one with AMX several times
    faster), so each run of a merged report says which it had."""
    bf16 = ", ".join(flag for flag in here["cpu_flags"] if flag in ("avx512_bf16", "amx_bf16")) or "none"
    return f"{here.get('torch_cpu_kernels', 'torch not loaded')}, bf16 instructions: {bf16}"


def markdown(results: dict) -> str:
    lines = ["# numprec bench", "", "Produced by:", ""]
    for entry in results["runs"]:
        where = f"; {entry['instructions']}" if "instructions" in entry else ""
        lines.append(f"- `{entry['command']}` ({entry['date']}: {', '.join(entry['sections'])}{where})")
    lines.append("")
    info = results["machine"]
    instructions = f" ({info['instructions']})" if "instructions" in info else ""
    cores = f"{info['cores']} cores, Python {info['python']}"
    lines += [f"Machine of the latest run: {info['cpu']}{instructions}, {cores}  "]
    libraries = info.get("libraries") or info.get("versions", {})  # "versions" in records before harness/machine.py
    lines += ["Libraries: " + ", ".join(f"{k} {v}" for k, v in sorted(libraries.items())), ""]
    if "eval" in results:
        lines += eval_markdown(results["eval"])
    if "train" in results:
        lines += train_markdown(results["train"])
    if "data" in results:
        lines += [
            "## Data generation (problems/s)",
            "",
            "| task | numprec harness | scratch | per-sample Python | harness / Python | scratch / Python |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in results["data"]:
            lines.append(
                f"| {r['task']} | {r['numprec_problems_per_s']:,.0f} | {r['scratch_problems_per_s']:,.0f} | "
                f"{r['python_problems_per_s']:,.0f} | {r['numprec_vs_python']:.1f}x | {r['scratch_vs_python']:.1f}x |"
            )
        lines.append("")
    if "memory" in results:
        lines += [
            "## Peak RSS of an evaluation process (load + 16 problems)",
            "",
            "| precision | peak RSS MB | model footprint MB |",
            "|---|---:|---:|",
        ]
        for r in results["memory"]:
            lines.append(f"| {r['precision']} | {r['peak_rss_mb']:.0f} | {r['footprint_mb']:.0f} |")
        lines.append("")
    if "eval_gpu" in results:
        lines += decode_markdown("Evaluation engine at the 8B scale", results["eval_gpu"])
    if "eval_gpu_cell" in results:
        lines += cell_markdown(results["eval_gpu_cell"])
    if "loop" in results:
        lines += decode_markdown("The decode loop's overhead", results["loop"])
    if "loop_cell" in results:
        lines += cell_markdown(results["loop_cell"])
    if "api" in results:
        lines += api_markdown(results["api"])
    if "rundir" in results:
        lines += rundir_markdown(results["rundir"])
    if "scoring" in results:
        lines += scoring_markdown(results["scoring"])
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=output_dir, required=True, help="directory for results.json and results.md")
    parser.add_argument("--only", type=name_list, help=f"sections to run (default all): {','.join(SECTIONS)}")
    parser.add_argument("--problems", type=PROBLEMS.arg, default=200, help="evaluation problems (default 200)")
    parser.add_argument("--repeats", type=REPEATS.arg, default=3, help="timed passes per measurement (default 3)")
    parser.add_argument(
        "--threads", type=THREADS.arg, default=1, help="threads per engine, the same for all (default 1)"
    )
    parser.add_argument(
        "--batch-size", type=BATCH_SIZE.arg, default=256, help="rows per batch, the same for all (default 256)"
    )
    parser.add_argument(
        "--device",
        type=device_name,
        default="cpu",
        help="cpu, cuda or cuda:N (default cpu): where train and loop run; eval on a GPU times a random-init "
        "Llama-3.1-8B architecture against generate() and the memory roofline",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="train: one shape per precision, alone and packed (inside ten minutes on a GPU), instead of the full plan",
    )
    args = parser.parse_args(argv)
    sections = args.only or list(SECTIONS)
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise UserError(f"unknown section(s) {', '.join(sorted(unknown))}; known: {', '.join(SECTIONS)}")
    if args.quick and "train" not in sections:
        raise UserError(f"--quick shortens the train section only, not {', '.join(sections)}; drop it or add train")
    command = command_line("bench.run", argv)
    lock = DirectoryLock(args.out, command)
    try:
        return bench(args, sections, command)
    finally:
        lock.release()


def read_results_json(path: Path) -> dict:
    """An earlier run's results.json in --out, whose sections this run keeps: a file that is not one (not JSON or
    UTF-8, not an object, its run list or a section of the wrong shape, a directory) is one line, and nothing is
    measured or written over what it holds."""
    if not path.exists():
        return {}
    remedy = "move it away or choose another --out"
    try:
        results = read_json(path, "bench.run keeps the sections of an earlier results.json in --out")
    except UserError as err:
        raise UserError(f"{err}; {remedy}") from None
    runs = results.get("runs", [])
    shapes = {"eval": dict, "eval_gpu": dict, "train": dict, "data": list, "memory": list, "loop": dict, "api": dict}
    shapes |= {"eval_gpu_cell": dict, "loop_cell": dict}
    shapes["rundir"] = dict
    problem = None
    if not isinstance(runs, list) or not all(
        isinstance(run, dict) and isinstance(run.get("command"), str) and isinstance(run.get("sections"), list)
        for run in runs
    ):
        problem = "its 'runs' is not a list of runs with a command and sections"
    elif not runs and not isinstance(results.get("command"), str):
        problem = "it names no run (no 'runs', no 'command')"
    elif "machine" in results and not isinstance(results["machine"], dict):
        problem = "its 'machine' is not an object"
    else:
        wrong = [name for name, kind in shapes.items() if name in results and not isinstance(results[name], kind)]
        problem = f"its section '{wrong[0]}' is not a {shapes[wrong[0]].__name__}" if wrong else None
    if problem:
        raise UserError(f"{path} is not a bench.run results file ({problem}); {remedy}")
    return results


def section_parts(section: str, args, work: Path) -> list[tuple[str, Callable[[], object]]]:
    """A section as its parts: (the key its figures take in results.json, what measures them), in order."""
    parts = {
        "eval": [("eval", lambda: bench_eval(args.problems, args.repeats, args.threads, args.batch_size, work))],
        "train": [("train", lambda: bench_train(args.repeats, args.threads, args.device, quick=args.quick))],
        "data": [("data", lambda: bench_data(args.repeats))],
        "memory": [("memory", lambda: bench_memory(args.threads, args.batch_size, work, quick_grid_problems(16)))],
        "loop": [
            ("loop", lambda: bench_decode("tiny", args.device, args.repeats, args.threads, args.batch_size)),
            ("loop_cell", lambda: bench_cell("tiny", args.device, args.repeats, args.threads, args.batch_size)),
        ],
        "api": [("api", lambda: bench_api(args.repeats, args.threads))],
        "rundir": [("rundir", bench_rundir)],
        "scoring": [("scoring", lambda: bench_scoring(args.repeats))],
    }
    if section == "eval" and args.device != "cpu":  # the 8B architecture on the GPU; one model for both parts
        common = (args.device, args.repeats, args.threads, args.batch_size)
        return [("eval_gpu", lambda: bench_decode("llama-3.1-8b", *common)),
                ("eval_gpu_cell", lambda: bench_cell("llama-3.1-8b", *common))]  # fmt: skip
    return parts[section]


def bench(args, sections: list[str], command: str) -> int:
    """Run ``sections`` into args.out (held by main's lock), keeping the sections an earlier run measured there."""
    path = args.out / "results.json"
    # Sections not run this time are kept from an earlier results.json in the same directory.
    results = read_results_json(path)
    runs = results.get("runs") or (
        [
            {
                "command": results["command"],
                "sections": [k for k in SECTIONS if k in results],
                "date": results.get("date"),
            }
        ]
        if results
        else []
    )
    here = machine()
    date = time.strftime("%Y-%m-%d %H:%M")
    runs.append({"command": command, "sections": sections, "date": date, "instructions": here["instructions"]})
    results.update(runs=runs, command=command, date=date, machine=here)
    with tempfile.TemporaryDirectory() as scratch_dir:
        work = Path(scratch_dir)
        for section in sections:
            for key, measure in section_parts(section, args, work):
                results[key] = measure()
                # Written after every part: a crash or a time limit later loses nothing measured.
                path.write_text(json.dumps(results, indent=2) + "\n")
                (args.out / "results.md").write_text(markdown(results))
    print((args.out / "results.md").read_text())
    return 0


if __name__ == "__main__":
    run(main)
