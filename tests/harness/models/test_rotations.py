"""QuIP's rotations before GPTQ (``mxfp4+quip+gptq``), made by llm-compressor and loaded by numprec: transformers
leaves a checkpoint's transform_config out, so the loaded model computes something else until harness/models/
rotations.py puts the run-time rotations on; then it computes bit for bit what llm-compressor's model computed in
memory right after quantizing. A stored rotation that is not the one compressed-tensors makes is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.backends.hf import HFBackend
from harness.core.errors import UserError
from harness.models import get_model, get_precision, rotations
from tests.harness.helpers import in_quantize_env, needs_quantize_env

pytestmark = [needs_quantize_env, pytest.mark.xdist_group("formats"), pytest.mark.slow]

PRECISION = "mxfp4+quip+gptq"
# llm-compressor's oneshot with the recipe harness.quantize writes, the model's logits taken in memory after it
MAKE = """
import sys
import torch
from datasets import Dataset
from llmcompressor import oneshot
from transformers import AutoModelForCausalLM, AutoTokenizer
from harness.models import fp4, get_model, get_precision
from harness.quantize import calibration_texts, recipe

source, out, ids = sys.argv[1], sys.argv[2], torch.load(sys.argv[3])
precision = get_precision(get_model("smollm2"), sys.argv[4])
tokenizer = AutoTokenizer.from_pretrained(source)
model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
data = Dataset.from_dict(tokenizer(calibration_texts(tokenizer, 8, 0), add_special_tokens=False))
fp4.register()
longest = max(len(row) for row in data["input_ids"])
oneshot(model=model, recipe=recipe(precision, precision.group_size), dataset=data, max_seq_length=longest,
        num_calibration_samples=8)
with torch.inference_mode():
    torch.save(model(ids).logits.float(), out + ".logits.pt")
model.save_pretrained(out, save_compressed=True)
tokenizer.save_pretrained(out)
"""


@pytest.fixture(scope="module")
def rotated(tiny_llama, tmp_path_factory) -> tuple[Path, torch.Tensor, torch.Tensor]:
    """The small Llama made mxfp4+quip+gptq, the token ids asked, and llm-compressor's logits for them."""
    work = tmp_path_factory.mktemp("rotated")
    ids = torch.tensor([[1, 504, 3458, 30, 216, 33, 28, 216, 35, 28, 216, 36, 30, 216, 45]])
    torch.save(ids, work / "ids.pt")
    result = in_quantize_env(MAKE, str(tiny_llama), str(work / "ckpt"), str(work / "ids.pt"), PRECISION)
    assert result.returncode == 0, result.stderr[-3000:]
    return work / "ckpt", ids, torch.load(work / "ckpt.logits.pt")


def loaded(path: Path, rotate: bool) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    from harness.backends.hf_loading import load_kwargs

    kwargs = load_kwargs(get_precision(get_model("smollm2"), PRECISION), "cpu", str(path))
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs).eval()
    if rotate:
        assert rotations.apply(model, path) == 28, "every linear layer of the 4 blocks"
    return model


def test_the_loaded_model_computes_what_llm_compressor_computed(rotated):
    path, ids, expected = rotated
    with torch.inference_mode():
        bare = loaded(path, rotate=False)(ids).logits.float()
        applied = loaded(path, rotate=True)(ids).logits.float()
    assert (bare - expected).abs().max() > 0.1 * expected.abs().max(), "without the rotations: another model"
    assert torch.equal(applied, expected)
    backend = HFBackend(str(path), get_precision(get_model("smollm2"), PRECISION))
    with torch.inference_mode():
        backend.model(ids)  # compressed-tensors decompresses at the first forward; the kernel column reads the layers
    assert backend.rotated_layers == 28 and "28 layers rotated as declared (QuIP)" in backend.kernel


def test_a_stored_rotation_other_than_the_declared_one_is_one_line(rotated, tmp_path):
    """The tied rotation matrix rewritten (its first two rows swapped): the checkpoint no longer holds the rotation its
    transform_config declares, and loading it says so instead of computing another model."""
    import shutil

    from safetensors.torch import load_file, save_file

    path = tmp_path / "changed"
    shutil.copytree(rotated[0], path)
    tensors = load_file(str(path / "model.safetensors"))
    (key,) = [key for key in tensors if key.endswith(".v_input.weight")]
    tensors[key] = tensors[key][[1, 0, *range(2, tensors[key].shape[0])]].contiguous()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"the rotation .*v_input\.weight differs"):
        loaded(path, rotate=True)
