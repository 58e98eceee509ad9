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
8. sensitivity  harness.sensitivity's table (every layer group scored two ways) on a random model: the 8B
           architecture with ``--device cuda``, the tiny one on a CPU; each phase timed (bench/sensitivity.py).
9. emulation  the quick grid at bf16, nvfp4, mxfp4 and bf16 with an fp8 KV cache, a process a precision, each
           format's time against bf16's (bench/emulation.py; CPU).
10. gptq   harness.quantize --precision nvfp4+gptq on a random model: the 8B architecture's first blocks with
           ``--device cuda``, the tiny one on a CPU; --problems calibration problems (bench/gptq.py).
11. deploy a random model made nvfp4+gptq, evaluated on vLLM (harness.eval --backend vllm --model-path): each
           layer's loaded scheme checked, or the one line that says why vLLM cannot run it (bench/deploy.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness  # noqa: F401  (thread settings before torch loads)
from bench.api import api_markdown, bench_api
from bench.common import quick_grid_problems
from bench.data import bench_data, data_markdown
from bench.decode import bench_cell, bench_decode, cell_markdown, decode_markdown
from bench.deploy import bench_deploy, deploy_markdown
from bench.emulation import bench_emulation, emulation_markdown
from bench.evaluation import ENGINES, bench_eval, eval_markdown
from bench.fp8 import bench_fp8, fp8_markdown
from bench.gptq import bench_gptq, gptq_markdown
from bench.memory import bench_memory, memory_markdown
from bench.rundir import bench_rundir, rundir_markdown
from bench.scoring import bench_scoring, scoring_markdown
from bench.sensitivity import bench_sensitivity, sensitivity_markdown
from bench.train import bench_train, train_markdown
from harness.core.bounds import BATCH_SIZE, REPEATS, THREADS, Bound
from harness.core.cli import ArgParser, command_line, name_list, output_dir, run
from harness.core.errors import UserError
from harness.core.files import read_json
from harness.core.lock import DirectoryLock

PROBLEMS = Bound(1, 100_000, "timed passes over more problems only take longer; 200 give a stable rate")


def device_name(text: str) -> str:
    """--device: cpu, cuda or cuda:N, which must be on this machine."""
    from scratch.numerics import resolve_device

    try:
        resolve_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


# ---------------------------------------------------------------- report


def machine() -> dict:
    """This machine as every record describes it (harness/core/machine.py), with a short line of its instructions."""
    from harness.core.machine import describe

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
    libraries = info.get("libraries") or info.get(
        "versions", {}
    )  # "versions" in records before harness/core/machine.py
    lines += ["Libraries: " + ", ".join(f"{k} {v}" for k, v in sorted(libraries.items())), ""]
    for part in PARTS:
        if part.key in results:
            lines += part.markdown(results[part.key])
    return "\n".join(lines)


@dataclass(frozen=True)
class Part:
    """A part of a bench section, one place to add one: the key its figures take in results.json, the --only
    section that runs it, what measures it (from the command's arguments and a work directory), how results.md shows
    it, the JSON shape its figures have, and whether it runs only on a GPU (True), only on the CPU (False) or on
    either (None)."""

    key: str
    section: str
    measure: Callable[[argparse.Namespace, Path], object]
    markdown: Callable[[Any], list[str]]
    shape: type = dict
    gpu: bool | None = None


def _decode(model: str, measure: Callable) -> Callable[[argparse.Namespace, Path], object]:
    return lambda args, work: measure(model, args.device, args.repeats, args.threads, args.batch_size)


def _architecture(args: argparse.Namespace) -> str:
    """The random model a part measures: the 8B architecture on a GPU, the tiny one on a CPU."""
    return "llama-3.1-8b" if args.device != "cpu" else "tiny"


PARTS = (
    Part(
        "eval",
        "eval",
        lambda args, work: bench_eval(args.problems, args.repeats, args.threads, args.batch_size, work, args.engines),
        eval_markdown,
        gpu=False,
    ),
    Part(
        "train",
        "train",
        lambda args, work: bench_train(args.repeats, args.threads, args.device, args.quick, args.save_part),
        train_markdown,
    ),
    Part("data", "data", lambda args, work: bench_data(args.repeats), data_markdown, list),
    Part(
        "memory",
        "memory",
        lambda args, work: bench_memory(args.threads, args.batch_size, work, quick_grid_problems(16)),
        memory_markdown,
        list,
    ),
    # the 8B architecture on the GPU, one model for both parts
    Part(
        "eval_gpu",
        "eval",
        _decode("llama-3.1-8b", bench_decode),
        lambda figures: decode_markdown("Evaluation engine at the 8B scale", figures),
        gpu=True,
    ),
    Part("eval_gpu_cell", "eval", _decode("llama-3.1-8b", bench_cell), cell_markdown, gpu=True),
    Part(
        "loop",
        "loop",
        _decode("tiny", bench_decode),
        lambda figures: decode_markdown("The decode loop's overhead", figures),
    ),
    Part("loop_cell", "loop", _decode("tiny", bench_cell), cell_markdown),
    Part(
        "fp8",
        "fp8",
        lambda args, work: bench_fp8(_architecture(args), args.device, args.repeats, args.threads, args.batch_size),
        fp8_markdown,
    ),
    Part(
        "sensitivity",
        "sensitivity",
        lambda args, work: bench_sensitivity(_architecture(args), args.device, args.threads, args.problems),
        sensitivity_markdown,
    ),
    Part("gptq", "gptq", lambda args, work: bench_gptq(_architecture(args), args.device, args.problems), gptq_markdown),
    Part("deploy", "deploy", lambda args, work: bench_deploy(args.device, args.problems), deploy_markdown),
    Part("api", "api", lambda args, work: bench_api(args.repeats, args.threads), api_markdown),
    Part(
        "emulation", "emulation", lambda args, work: bench_emulation(args.repeats, work), emulation_markdown, gpu=False
    ),
    Part("rundir", "rundir", lambda args, work: bench_rundir(), rundir_markdown),
    Part("scoring", "scoring", lambda args, work: bench_scoring(args.repeats), scoring_markdown),
)
SECTIONS = tuple(dict.fromkeys(part.section for part in PARTS))


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=output_dir, required=True, help="directory for results.json and results.md")
    parser.add_argument("--only", type=name_list, help=f"sections to run (default all): {','.join(SECTIONS)}")
    parser.add_argument(
        "--engines", type=engine_list, default=list(ENGINES),
        help=f"the eval section's engines (default all that are set up): {','.join(ENGINES)}",
    )  # fmt: skip
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
    shapes = {part.key: part.shape for part in PARTS}
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


def engine_list(text: str) -> list[str]:
    """argparse type: the eval section's engines by name, each one it has."""
    names = name_list(text)
    unknown = [name for name in names if name not in ENGINES]
    if unknown:
        raise argparse.ArgumentTypeError(f"no engine {unknown[0]}: the eval section has {', '.join(ENGINES)}")
    return names


def section_parts(section: str, args, work: Path) -> list[tuple[str, Callable[[], object]]]:
    """A section as its parts: (the key its figures take in results.json, what measures them), in order."""
    on_gpu = args.device != "cpu"
    return [
        (part.key, lambda part=part: part.measure(args, work))
        for part in PARTS
        if part.section == section and part.gpu in (None, on_gpu)
    ]


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

                def save(value, key=key) -> None:
                    """A part's figures into results.json and results.md: when it ends, and as it goes where a part
                    hands over what it measured so far (the train step, pack by pack)."""
                    results[key] = value
                    path.write_text(json.dumps(results, indent=2) + "\n")
                    (args.out / "results.md").write_text(markdown(results))

                args.save_part = save
                # Written after every part: a crash or a time limit later loses nothing measured.
                save(measure())
    print((args.out / "results.md").read_text())
    return 0


if __name__ == "__main__":
    run(main)
