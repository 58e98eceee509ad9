import gc
import os
import shutil

import pytest

from tests.needs import require

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The suite's processes hold torch, transformers and models as long as they live, as a command's does: they collect
# garbage as seldom as a command does (harness/core/startup.py).
gc.set_threshold(50_000, *gc.get_threshold()[1:])
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Each of the suite's workers (pytest-xdist, one per core) and the commands it starts compute on one thread:
    # two workers of two threads each on two cores would spend their time switching.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("NUMPREC_THREADS", "1")


# The fast tier (pytest -m "not slow") leaves out what runs a real model, a server, a cluster, a training run or a
# subprocess of the project's commands: the modules below throughout, and elsewhere every test using these fixtures.
SLOW_MODULES = {
    "tests/test_slurm.py",
    "tests/test_interrupts.py",
    "tests/bench/test_run.py",
    "tests/bench/test_decode.py",
    "tests/finetune/test_train.py",
    "tests/harness/backends/test_api.py",
    "tests/harness/backends/test_api_evidence.py",
    "tests/harness/models/test_autoawq.py",
    "tests/harness/backends/test_backend.py",
    "tests/harness/runs/test_eval.py",
    "tests/harness/runs/test_parallel.py",
    "tests/harness/models/test_quantized.py",
    "tests/harness/backends/test_vllm.py",
    "tests/scratch/test_sweep.py",
    "tests/scratch/test_train.py",
}
SLOW_FIXTURES = {"smollm2_fp32", "gptq_checkpoint", "awq_checkpoint", "tiny_autoawq", "llamacpp_q8", "tiny_llama"}


def pytest_sessionstart(session):
    """The embedded model converted into numprec's cache before any test runs (in the controller, once): on a fresh
    machine its once-only line on stderr ("converting ... (once, ~30 s)") would otherwise land in whichever test
    loads it first, and a test that counts its stderr lines would flip with the order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    try:
        from harness.models.registry import get_model
        from harness.models.weights import converted_gguf_package

        converted_gguf_package(get_model("smollm2"))
    except ImportError:  # the embedded model is not installed: the tests that need it skip or say so
        pass


@pytest.fixture
def mpirun() -> str:
    """Open MPI's launcher, for accelerate's multi-process --cpu launcher."""
    require(shutil.which("mpirun") is not None, "NUMPREC_REQUIRE_MPI", "no mpirun here", "apt-get install openmpi-bin")
    return shutil.which("mpirun")


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """tests/tiny.py's small Llama, written once per worker."""
    from tests.tiny import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama") / "tiny-llama")


def pytest_collection_finish(session):
    """What collection imported (torch, transformers, the test modules: hundreds of thousands of objects) is frozen:
    the tests' full collections walk what the tests make, not it again each time (three backend modules, -n 0: 2.6
    CPU-s collecting against 4.9, measured here). Objects the tests make, fixtures' models among them, are collected
    as before."""
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    """Tests of real models and processes are ``slow`` (SLOW_MODULES, SLOW_FIXTURES, or marked so by hand).
    ``@pytest.mark.gpu`` tests exercise CUDA paths: run whenever CUDA is present, skipped (and said so) otherwise."""
    from tests.devices import HAS_CUDA

    for item in items:
        module = item.nodeid.split("::")[0]
        if module in SLOW_MODULES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marked gpu); runs on GPU machines")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config) -> str:
    """The CPU kind the suite runs on (harness/core/machine.py's CPU_KINDS), first: the kernels that decide what
    the tests marked ``cpu_kinds`` expect."""
    from harness.core.machine import cpu_bf16_instructions, cpu_kind, cpu_name

    return f"CPU kind: {cpu_kind()} ({cpu_name()}; bf16 instructions: {', '.join(cpu_bf16_instructions()) or 'none'})"


def pytest_runtest_setup(item):
    """A test whose expectation depends on the CPU's kernels lists the kinds it was reasoned for
    (``@pytest.mark.cpu_kinds(...)``); it says which kind it runs on, and on a kind it does not list it fails at once,
    naming it, rather than pass or fail by a kernel nobody reasoned about."""
    from harness.core.machine import cpu_kind

    marker = item.get_closest_marker("cpu_kinds")
    if marker is None:
        return
    here = cpu_kind()
    item.user_properties.append(("cpu_kind", here))
    if here not in marker.args:
        pytest.fail(
            f"{item.nodeid} was reasoned for the CPU kinds {', '.join(marker.args)}, not this one ({here}): check "
            "what its kernels compute here, then list the kind",
            pytrace=False,
        )
