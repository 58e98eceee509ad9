"""Served against in-process: the quick grid through llama.cpp's OpenAI-compatible server (harness.serve, the api
backend) and through the in-process llamacpp backend, on the same GGUF, by bench.run's ``api`` section.

Concurrency C is served by C replicas of the server (llama-cpp-python's server decodes one request at a time), each
with cores/C threads (at least one), all behind one --api-base list; the in-process backend decodes the grid at its
batch size and, for the per-request overhead, one problem at a time. Every run is the whole harness.eval command,
model loading included; servers start (and load) before their clock starts. The servers keep the previous request's
prefix (--prefix-cache), as a deployment would; without it every request decodes its ~200-token prompt again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import log, median
from harness.diff import by_problem, same_output
from harness.serve import free_port

PRECISION = "gguf-q4_1"


def start_servers(count: int, threads: int) -> tuple[list[subprocess.Popen], list[str]]:
    processes, urls = [], []
    for _ in range(count):
        port = free_port()
        command = [sys.executable, "-m", "harness.serve", "--precision", PRECISION, "--port", str(port)]
        command += ["--threads", str(threads), "--prefix-cache"]
        processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        urls.append(f"http://127.0.0.1:{port}/v1")
    deadline = time.monotonic() + 120
    for url in urls:
        while True:
            try:
                urllib.request.urlopen(url + "/models", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"harness.serve at {url} did not start") from None
                time.sleep(0.3)
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
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        times: dict[str, list[float]] = {}
        for round_index in range(repeats):
            for name, args in (("in-process", grid), ("in-process batch 1", [*grid, "--batch-size", "1"])):
                times.setdefault(name, []).append(timed_eval(args, work / f"{name}-{round_index}".replace(" ", "_")))
                log(f"api: {name} {times[name][-1]:.1f} s")
            for concurrency in concurrencies:
                servers, urls = start_servers(concurrency, max(1, cores // concurrency))
                try:
                    args = [*grid, "--backend", "api", "--api-base", ",".join(urls), "--concurrency", str(concurrency)]
                    name = f"served, concurrency {concurrency}"
                    times.setdefault(name, []).append(timed_eval(args, work / f"c{concurrency}-{round_index}"))
                    log(f"api: {name} ({concurrency} replica(s)) {times[name][-1]:.1f} s")
                finally:
                    for server in servers:
                        server.terminate()
                    for server in servers:
                        server.wait(timeout=30)
        # The answer-equality check: served one request at a time against in-process one problem at a time (the
        # same decoding, no batch), problem by problem, trailing whitespace aside (the server drops the stop newline).
        alone, served = by_problem(work / "in-process_batch_1-0"), by_problem(work / "c1-0")
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
    top = max(concurrencies)
    summary["served_vs_in_process"] = (
        summary[f"served, concurrency {top}"]["seconds"] / summary["in-process"]["seconds"]
    )
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
        f"- served at the highest concurrency: {result['served_vs_in_process']:.2f}x the in-process backend's time",
        f"- outputs served at concurrency 1 identical to in-process at batch 1: {result['identical_outputs']} of "
        f"{result['compared_outputs']} (these servers keep the previous request's prefix, as a deployment would, and "
        "ggml rounds a reused prefix differently: near-ties then part; harness.serve without --prefix-cache is the "
        "reproducible setting, README 'Served models')",
        "",
    ]
    return lines
