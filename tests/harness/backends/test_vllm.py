"""vLLM for real, on this CPU: ``--backend vllm`` (vLLM's offline engine in .venv-vllm, handed token ids by the main
environment) against the transformers backend, and vLLM's own OpenAI server (``harness.serve --engine vllm``)
behind the api backend against the in-process engine. Requests go to 127.0.0.1 only."""

from __future__ import annotations

import platform
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends.vllm import PYTHON_OVERRIDE, check_vllm_kernels, vllm_python
from harness.core.machine import cpu_flags
from harness.diff import by_problem, same_output
from harness.models import precision_registry
from harness.models.weights import has_cuda
from harness.serve import wait_until_serving
from tests.console import foreign_lines
from tests.harness.helpers import ROOT, assert_user_error, command_env, csv_rows, free_port, require_vllm, run_module

pytestmark = pytest.mark.xdist_group("vllm")  # one worker: one engine and one server at a time

GRID = ["--model", "smollm2", "--precision", "fp32", "--tasks", "add,mul", "--lengths", "1", "--samples", "4"]


@pytest.fixture(scope="session", autouse=True)
def vllm_environment():
    require_vllm()


def evaluate(out: Path, *args: str) -> subprocess.CompletedProcess:
    result = run_module("harness.eval", *GRID, *args, "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def differing(first: Path, second: Path) -> list[tuple[str, str]]:
    one, other = by_problem(first), by_problem(second)
    assert one.keys() == other.keys() and len(one) == 8
    return [(one[key]["output"], other[key]["output"]) for key in one if not same_output(one[key], other[key])]


@pytest.fixture(scope="session")
def in_process(tmp_path_factory) -> Path:
    """The grid through ``--backend vllm``, as a user's command; its console is numprec's alone."""
    out = tmp_path_factory.mktemp("vllm") / "run"
    result = evaluate(out, "--backend", "vllm")
    foreign = foreign_lines(result.stderr)
    assert not foreign, f"--backend vllm let vLLM speak: {foreign[:5]}"
    return out


@pytest.fixture(scope="module")
def server():
    """``python -m harness.serve --engine vllm`` on a free port; stopped with Ctrl-C, its console numprec's alone.
    Stopped once this module's tests are done: idle, vLLM's CPU worker still spins (about 3 CPU-s a minute)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.serve", "--engine", "vllm", "--port", str(port)],
        cwd=ROOT,
        env=command_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_serving([process], [url], seconds=300)
    except RuntimeError:
        process.kill()
        raise RuntimeError(f"harness.serve --engine vllm did not serve: {process.communicate()[1][-2000:]}") from None
    yield url
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert not foreign_lines(err), f"harness.serve --engine vllm let vLLM speak: {foreign_lines(err)[:5]}"


def test_vllm_answers_what_transformers_answers_in_fp32(in_process, tmp_path):
    """Same prompts, token ids, budgets and stop rule, greedy, fp32: every output identical to the hf backend's; each
    row names vLLM's version, device, dtype, attention backend and linear method."""
    local = tmp_path / "hf"
    evaluate(local, "--backend", "hf")
    assert not differing(local, in_process)
    row = csv_rows(in_process / "results.csv")[0]
    assert row["backend"] == "vllm" and row["matmul_precision"] == "ieee fp32"
    assert row["kernel"].startswith("vllm 0.32.0 on cpu (float32, eager); attention CPU_ATTN; linear dense"), row
    assert int(row["gen_tokens"]) > 0 and float(row["tokens_per_s"]) > 0


def test_the_served_engine_answers_what_the_in_process_one_does(in_process, server, tmp_path):
    """vLLM's OpenAI server behind the api backend, completions mode, four requests in flight (the server batches
    them as it likes): every output identical to the in-process engine's; the answering model recorded."""
    served = tmp_path / "served"
    evaluate(served, "--backend", "api", "--api-base", server, "--concurrency", "4")
    assert not differing(in_process, served)
    answered_as = {(row["served_model"], row["request_mode"]) for row in csv_rows(served / "results.csv")}
    assert answered_as == {("smollm2", "completions")}


def test_chat_mode_sends_the_thinking_switch_vllm_takes(server, tmp_path):
    """Chat mode with the server's template and --thinking off: the switch goes as chat_template_kwargs, which vLLM
    accepts (a template without the switch ignores it), and every problem is answered."""
    out = tmp_path / "chat"
    chat = ["--api-endpoint", "chat", "--thinking", "off", "--tasks", "add", "--lengths", "1"]
    evaluate(out, "--backend", "api", "--api-base", server, *chat)
    cells = csv_rows(out / "results.csv")
    assert {row["request_mode"] for row in cells} == {"chat"}
    assert sum(int(row["n"]) for row in cells) == 4


def test_a_python_without_vllm_is_one_line(tmp_path):
    result = run_module(
        "harness.eval", *GRID, "--backend", "vllm", "--out", str(tmp_path / "run"), env={PYTHON_OVERRIDE: "/no/python"}
    )
    assert_user_error(result, PYTHON_OVERRIDE, "/no/python")
    assert not (tmp_path / "run").exists()


def test_a_precision_vllm_cannot_run_is_one_line(tmp_path):
    result = run_module("harness.serve", "--engine", "vllm", "--precision", "nf4", "--port", str(free_port()))
    assert_user_error(result, "vllm engine", "nf4")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="vLLM's AVX2 and AVX-512 libraries are x86's")
def test_the_cpu_kernels_a_format_needs_are_where_the_registry_says():
    """precisions.yaml's vllm_cpu_needs, checked against vLLM's own libraries: its AVX2 one (what vLLM loads on an x86
    CPU without AVX-512) lacks the int4 weight-only kernel gptq-w4 and awq-w4 need, and has the W8A8 matmuls."""
    registry = precision_registry()
    avx512 = ("avx512f", "avx512bw", "avx512vl")
    assert registry["gptq-w4"].vllm_cpu_needs == registry["awq-w4"].vllm_cpu_needs == avx512
    probe = (
        "import importlib.util, pathlib, torch\n"
        "folder = pathlib.Path(importlib.util.find_spec('vllm').origin).parent\n"
        "torch.ops.load_library(str(folder / '_C_AVX2.abi3.so'))\n"
        "print(hasattr(torch.ops._C, 'cpu_gemm_wna16'), hasattr(torch.ops._C, 'onednn_scaled_mm'))\n"
    )
    result = subprocess.run([vllm_python(), "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False", "True"]


@pytest.mark.cpu_kinds("avx2", "avx512", "avx512-bf16", "amx")
def test_a_server_of_a_format_this_cpu_has_no_vllm_kernel_for_is_one_line(tmp_path):
    """``harness.serve --engine vllm --precision gptq-w4``: where the CPU lacks AVX-512 the kernel is said missing
    before the server starts (or its checkpoint is made); elsewhere the check lets it through (and the command would
    make the checkpoint on first use and serve it, as the other tests here serve theirs)."""
    precision = precision_registry()["gptq-w4"]
    if has_cuda() or set(precision.vllm_cpu_needs) <= set(cpu_flags()):
        check_vllm_kernels(precision)
        return
    result = run_module(
        "harness.serve", "--engine", "vllm", "--precision", "gptq-w4", env={"NUMPREC_CACHE": str(tmp_path)}
    )
    assert_user_error(result, "vLLM's CPU kernel for gptq-w4 needs avx512", "which this CPU lacks")
    assert not (tmp_path / "quantized").exists(), "said before the checkpoint was made"
