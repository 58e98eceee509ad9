"""AutoAWQ checkpoints through the llama-int4 preset's loading path: transformers 5 + gptqmodel's AWQ kernels.

The conversion from llm-compressor's compressed-tensors output must keep every 4-bit code, zero point and
scale; the loaded layers must compute with exactly those values; a model calibrated by harness.quantize in that
format must be evaluated by harness.eval with its kernel, footprint and activation dtype recorded.
"""

import json
import shutil
import sys

import pytest
import torch

from harness.backends import Sampling
from harness.backends.hf import HFBackend
from harness.core.errors import UserError
from harness.models import awq_kernels, get_model, get_precision
from harness.models.weights import default_tokenizer_dir
from harness.questions.problems import Task, generate
from harness.questions.prompts import user_message
from tests.devices import HAS_CUDA
from tests.harness.helpers import assert_user_error, csv_rows, needs_quantize_env, run_module
from tests.tiny import linear_bytes_per_weight

# One xdist worker runs the modules of group "quantized": they share the session's quantized checkpoints
# (tests/harness/conftest.py), which each worker would otherwise make again.
pytestmark = pytest.mark.xdist_group("quantized")

pytest.importorskip("gptqmodel", reason="pip install -e '.[awq]' (scripts/setup.sh does)")

GROUP = 32
CPU_KERNELS = {"gptqmodel.TorchAtenAwqLinear", "gptqmodel.AwqTorchLinear", "gptqmodel.TorchFusedAwqLinear"}


@pytest.fixture(scope="module")
def tiny_autoawq(tmp_path_factory):
    """A small random Llama whose linear layers hold known asymmetric int4 codes, written as llm-compressor
    writes them (compressed-tensors pack-quantized, packed zero points) and converted to AutoAWQ; it takes the
    default model's tokenizer, so the harness's backend runs it like any model."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    from harness.models.autoawq import to_autoawq

    root = tmp_path_factory.mktemp("tiny-awq")
    tokenizer_dir = default_tokenizer_dir()
    generator = torch.Generator().manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    state, expected = {}, {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or name == "lm_head":
            continue
        rows, cols = module.weight.shape
        codes = torch.randint(-8, 8, (rows, cols), generator=generator, dtype=torch.int8)
        zeros = torch.randint(-8, 8, (rows, cols // GROUP), generator=generator, dtype=torch.int8)
        # bf16-representable fp16 scales (as from a bf16 calibration): the CPU kernel keeps its scales in bf16
        scales = (torch.rand(rows, cols // GROUP, generator=generator) * 0.02 + 1e-3).to(torch.bfloat16).half()
        state[f"{name}.weight_packed"] = pack_to_int32(codes, 4)
        state[f"{name}.weight_zero_point"] = pack_to_int32(zeros, 4, packed_dim=0).contiguous()
        state[f"{name}.weight_scale"] = scales
        state[f"{name}.weight_shape"] = torch.tensor([rows, cols])
        zero, scale = (torch.repeat_interleave(x.float(), GROUP, 1) for x in (zeros, scales))
        weight = (codes.float() - zero) * scale
        # AWQ kernels add a product of the code and a zero offset ((8 - z) * s for the CPU's aten int4 kernel),
        # in fp16 (GPU) or bf16 (CPU), and round the output: each term by at most 2^-8 of itself, so at most
        # a quarter of one quantization step (s) in all; a misplaced code or zero point is off by whole steps.
        rounding = ((weight.abs() + (zero.abs() + 8) * scale) * 2**-7) + 1e-7
        expected[name] = (weight, rounding)
    for key, value in model.state_dict().items():
        owner = key.rsplit(".", 1)[0]
        if owner not in expected and key != "lm_head.weight":
            state[key] = value.to(torch.float16)
    source = root / "compressed-tensors"
    source.mkdir()
    save_file(state, source / "model.safetensors", metadata={"format": "pt"})
    scheme = {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group", "group_size": GROUP}
    quantization = {"group_0": {"targets": ["Linear"], "weights": scheme}}
    settings = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": quantization}
    (source / "config.json").write_text(json.dumps({**config.to_dict(), "quantization_config": settings}))
    for item in tokenizer_dir_files(tokenizer_dir):
        shutil.copy2(item, source / item.name)
    info = to_autoawq(source, root / "autoawq")
    return root / "autoawq", expected, info


def tokenizer_dir_files(directory):
    from pathlib import Path

    return [p for p in Path(directory).iterdir() if p.name.startswith(("tokenizer", "special_tokens", "chat_template"))]


def test_conversion_writes_autoawq_gemm(tiny_autoawq):
    path, expected, info = tiny_autoawq
    config = json.loads((path / "config.json").read_text())["quantization_config"]
    assert config == {
        "quant_method": "awq",
        "bits": 4,
        "group_size": GROUP,
        "zero_point": True,
        "version": "gemm",
        "modules_to_not_convert": None,
    }
    assert info["layers"] == len(expected) == 14 and info["max_scale_change_fp16"] == 0.0
    from safetensors import safe_open

    with safe_open(path / "model.safetensors", "pt") as tensors:
        qweight = tensors.get_tensor("model.layers.0.mlp.down_proj.qweight")
        assert qweight.dtype == torch.int32 and tuple(qweight.shape) == (128, 64 // 8), "[in, out/8] as AutoAWQ"
        assert not any(key.endswith("weight_packed") for key in tensors.keys())  # noqa: SIM118 (safe_open)


def test_loaded_layers_compute_with_exactly_the_converted_codes(tiny_autoawq):
    """Through the harness's own loader (the llama-int4 preset's path): every layer is a gptqmodel AWQ kernel,
    and multiplying the identity by it returns (q - z) * s for every weight, up to the kernel's fp16 rounding
    (< 0.03 of a step): a wrong nibble order, transpose or zero-point offset would be off by whole steps."""
    path, expected, _ = tiny_autoawq
    awq = get_precision(get_model("smollm2"), "awq-w4")
    backend = HFBackend(str(path), awq, batch_size=4)
    assert backend.kernel.startswith("gptqmodel.")
    if not HAS_CUDA:
        assert backend.kernel in CPU_KERNELS
    assert backend.model.dtype == torch.float16
    layers = dict(backend.model.named_modules())
    # What the row records as the activation dtype is what the kernel computes in: 1 + 2^-9 is a float16 but
    # rounds to 1 in bfloat16, so the output tells which one the layer multiplied.
    layer = layers["model.layers.0.mlp.down_proj"]
    scaled = torch.eye(layer.in_features, dtype=torch.float16, device=backend.device) * (1 + 2**-9)
    with torch.inference_mode():
        ratio = (layer(scaled).float() / layer(scaled / (1 + 2**-9)).float()).nanmedian().item()
    assert backend.activation_dtype == ("bfloat16" if ratio == 1.0 else "float16"), (backend.kernel, ratio)
    with torch.inference_mode():
        for name, (weight, rounding) in expected.items():
            layer = layers[name]
            identity = torch.eye(layer.in_features, dtype=torch.float16, device=backend.device)
            computed = layer(identity).float().cpu().t()
            assert (computed - weight).abs().le(rounding).all(), name
    problems = generate(Task("add"), 10, 1, 3, seed=0)
    outputs = backend.generate([backend.chat_prompt(user_message(p)) for p in problems], 6, Sampling.named("greedy"))
    assert [o.tokens >= 1 for o in outputs] == [True] * 3


@needs_quantize_env
def test_harness_quantize_awq_writes_a_checkpoint_harness_eval_runs(awq_checkpoint, tmp_path):
    """python -m harness.quantize --method awq (llm-compressor in its own environment, then the AutoAWQ rewrite)
    and harness.eval --precision awq-w4 on it: through the llama-int4 preset's loading path, with the kernel,
    footprint and activation dtype that were really in force."""
    config = json.loads((awq_checkpoint / "config.json").read_text())["quantization_config"]
    assert (config["quant_method"], config["version"], config["bits"], config["group_size"]) == ("awq", "gemm", 4, 64)
    note = json.loads((awq_checkpoint / "numprec_quantize.json").read_text())
    assert (note["method"], note["format"], note["layers"], note["calibration_samples"]) == (
        "awq",
        "autoawq-gemm",
        28,  # 4 layers x 7 linear layers
        4,
    )
    assert not list(awq_checkpoint.parent.glob("*compressed-tensors*")), "the intermediate checkpoint is removed"
    out = tmp_path / "run"
    args = ["--precision", "awq-w4", "--model-path", str(awq_checkpoint), "--tasks", "add", "--lengths", "1"]
    result = run_module("harness.eval", *args, "--samples", "8", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "GPT-QModel" not in result.stdout + result.stderr, "gptqmodel's banner is kept quiet"
    (row,) = csv_rows(out / "results.csv")
    assert (row["method"], row["weight_bits"], row["group_size"]) == ("awq", "4", "64")
    assert row["kernel"].startswith("gptqmodel.") and (row["kernel"] in CPU_KERNELS) != HAS_CUDA
    assert row["activation_dtype"] == ("float16" if HAS_CUDA else "bfloat16"), "what gptqmodel's kernel computes in"
    assert linear_bytes_per_weight(float(row["footprint_mb"])) < 0.8, "4-bit layers (fp16 would take 2 bytes)"
    assert int(row["gen_tokens"]) > 8


@needs_quantize_env
def test_the_llama_int4_preset_loads_an_autoawq_checkpoint(awq_checkpoint):
    """The preset's own objects, end to end: its registry entry and precision resolve the weights (given with
    --model-path) and the backend loads and generates; only the GPU requirement of the 8B preset is not asked."""
    from harness.models.weights import variant_weights

    preset = get_model("llama-int4")
    precision = get_precision(preset, preset.default_precision)
    weights = variant_weights(preset, precision, str(awq_checkpoint))
    backend = HFBackend(weights, precision, batch_size=2)
    assert backend.kernel.startswith("gptqmodel.") and linear_bytes_per_weight(backend.footprint_mb) < 0.8
    problems = generate(Task("add"), 10, 1, 2, seed=0)
    outputs = backend.generate([backend.chat_prompt(user_message(p)) for p in problems], 12, Sampling.named("greedy"))
    assert all(o.tokens >= 1 for o in outputs)


@needs_quantize_env
def test_a_checkpoint_is_evaluated_only_under_its_own_method(awq_checkpoint, gptq_checkpoint):
    result = run_module("harness.eval", "--precision", "gptq-w4", "--model-path", str(awq_checkpoint))
    assert_user_error(result, "calibrated with awq", "--precision awq-w4")
    result = run_module("harness.eval", "--precision", "awq-w4", "--model-path", str(gptq_checkpoint))
    assert_user_error(result, "not in AutoAWQ format", "harness.quantize --method awq")


def test_an_asymmetric_compressed_tensors_checkpoint_is_refused_before_loading(tiny_autoawq):
    """transformers cannot load llm-compressor's own AWQ format (packed zero points): one line, the way out."""
    source = tiny_autoawq[0].parent / "compressed-tensors"
    result = run_module("harness.eval", "--precision", "awq-w4", "--model-path", str(source), "--lengths", "1")
    assert_user_error(result, "not in AutoAWQ format", "--format autoawq")
    result = run_module("harness.eval", "--precision", "gptq-w4", "--model-path", str(source), "--lengths", "1")
    assert_user_error(result, "asymmetric compressed-tensors", "--format autoawq")


def test_autoawq_format_is_for_awq_only():
    result = run_module("harness.quantize", "--method", "gptq", "--format", "autoawq", "--out", "/tmp/never")
    assert_user_error(result, "--format autoawq holds AWQ checkpoints")


@pytest.mark.gpu
def test_on_cuda_the_awq_checkpoint_runs_on_gpu_kernels(tiny_autoawq):
    """transformers hands the CUDA device map to gptqmodel, which must pick a GPU kernel, not the torch fallback."""
    path, expected, _ = tiny_autoawq
    backend = HFBackend(str(path), get_precision(get_model("smollm2"), "awq-w4"), batch_size=4)
    assert backend.device == "cuda" and backend.kernel not in CPU_KERNELS, backend.kernel
    layer = dict(backend.model.named_modules())["model.layers.0.mlp.down_proj"]
    assert layer.qweight.is_cuda


class Pretended(awq_kernels.Machine):
    """A GPU machine as the test says it is: what is built, what can be built, whether Triton is there; builds
    are recorded, not run."""

    def __init__(self, built: bool = False, can_build: bool = True, triton: bool = True):
        self._built, self._can_build, self._triton, self.builds = built, can_build, triton, []

    def built(self, extension):
        return self._built

    def can_build(self):
        return self._can_build

    def has_triton(self):
        return self._triton

    def build(self, extension):
        self.builds.append(extension)
        self._built = True
        return None

    def build_seconds(self, extension):
        return 117.0


def test_the_awq_kernel_is_chosen_named_and_built_before_loading():
    """On a GPU: Marlin when built, built first (said, and how long) where it can be, else a kernel with nothing to
    build; NUMPREC_AWQ_KERNEL's choice; on the CPU gptqmodel's ATen kernel. Pretended machines: no GPU here."""
    assert awq_kernels.choose("cuda", Pretended(built=True), wanted="") == awq_kernels.KERNELS["marlin"]
    needs_build = Pretended(built=False)
    kernel = awq_kernels.choose("cuda", needs_build, wanted="")
    said: list[str] = []
    assert kernel.name == "gptqmodel.AwqMarlinLinear"
    assert awq_kernels.prepare(kernel, said.append, needs_build)[0] == kernel
    assert needs_build.builds == ["marlin_fp16"] and len(said) == 2
    assert said[0].startswith("building gptqmodel's gptqmodel.AwqMarlinLinear kernel for AWQ int4 (once;")
    assert "about 2 min" in said[0] and said[1].startswith("built gptqmodel.AwqMarlinLinear in ")
    assert awq_kernels.prepare(kernel, said.append, needs_build) == (kernel, 0.0) and len(said) == 2, "built once"
    no_compiler = Pretended(built=False, can_build=False)
    assert awq_kernels.choose("cuda", no_compiler, wanted="").name == "gptqmodel.AwqGEMMTritonLinear"
    no_triton = Pretended(built=False, can_build=False, triton=False)
    assert awq_kernels.choose("cuda", no_triton, wanted="").name == "gptqmodel.AwqTorchLinear"
    assert awq_kernels.choose("cuda", Pretended(built=True), wanted="torch").name == "gptqmodel.AwqTorchLinear"
    with pytest.raises(UserError, match="names no AWQ kernel"):
        awq_kernels.choose("cuda", Pretended(), wanted="exllama")
    assert awq_kernels.choose("cpu", Pretended(), wanted="marlin") == awq_kernels.CPU_KERNEL


class UnbuiltMarlin(awq_kernels.Machine):
    """This machine as it is, but for two facts no CPU machine has: Marlin not built yet, Triton at hand. Its build
    is gptqmodel's real one, which fails here (no CUDA)."""

    def built(self, extension):
        return False

    def has_triton(self):
        return True


class FailingMarlin(UnbuiltMarlin):
    """On a GPU gptqmodel's real build would run (minutes) and might succeed: its failure is pretended there."""

    def build(self, extension):
        return "pretended: the compiler stopped"


# What fails the build, chosen by the hardware the test runs on (said in its id): never a Marlin build on a GPU.
FAILING = FailingMarlin() if HAS_CUDA else UnbuiltMarlin()
FAILING_ID = "gpu: a pretended failing build" if HAS_CUDA else "cpu: gptqmodel's real build fails (no CUDA)"


@pytest.mark.parametrize("machine", [FAILING], ids=[FAILING_ID])
def test_a_marlin_build_that_fails_falls_back_to_tritons_kernel_with_one_line(machine):
    said: list[str] = []
    kernel, seconds = awq_kernels.prepare(awq_kernels.KERNELS["marlin"], said.append, machine)
    assert kernel == awq_kernels.KERNELS["triton"] and seconds >= 0
    assert len(said) == 2 and said[0].startswith("building gptqmodel's gptqmodel.AwqMarlinLinear kernel")
    assert said[1].startswith("could not build gptqmodel.AwqMarlinLinear in ")
    assert said[1].endswith("AWQ int4 runs on gptqmodel.AwqGEMMTritonLinear instead") and "\n" not in said[1]


HEADERS_ID = "gpu: pip's nvidia headers hidden" if HAS_CUDA else "cpu: no CUDA headers here"


@pytest.mark.parametrize("hide", [HAS_CUDA], ids=[HEADERS_ID])
def test_marlin_is_not_chosen_where_the_cuda_headers_it_includes_are_missing(hide, tmp_path, monkeypatch):
    """A toolkit with nvcc and ninja but without cuSPARSE's, cuBLAS's and cuSOLVER's headers (a runtime image, or
    this machine's /usr/local/cuda) cannot build Marlin: the choice is Triton's kernel, before any load. On a GPU
    machine the CUDA wheels' headers (the nvidia package) are hidden, so that only the toolkit made here counts."""
    if hide:
        monkeypatch.setitem(sys.modules, "nvidia", None)
    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    for tool in ("nvcc", "ninja"):
        (toolkit / "bin" / tool).write_text("#!/bin/sh\n")
        (toolkit / "bin" / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(toolkit / "bin"))
    monkeypatch.setenv("CUDA_HOME", str(toolkit))

    class Unbuilt(UnbuiltMarlin):
        pass

    assert not Unbuilt().can_build()
    assert awq_kernels.choose("cuda", Unbuilt(), wanted="") == awq_kernels.KERNELS["triton"]
    assert awq_kernels.missing_headers(awq_kernels.header_dirs(toolkit)) == list(awq_kernels.MARLIN_HEADERS)
    for header in awq_kernels.MARLIN_HEADERS:
        (toolkit / "include" / header).write_text("")
    assert Unbuilt().can_build() and awq_kernels.choose("cuda", Unbuilt(), wanted="").name.endswith("MarlinLinear")


@pytest.mark.filterwarnings("ignore:You passed `quantization_config`:UserWarning")  # the backend is the point
@pytest.mark.parametrize("device", ["cuda" if HAS_CUDA else "cpu"], ids=lambda d: f"{d}: its own kernel")
def test_the_kernel_named_before_loading_is_the_one_that_runs(device, tiny_autoawq, monkeypatch):
    """The choice is named before the checkpoint loads, and the loaded model's layers are that kernel (on a CPU
    gptqmodel's ATen kernel; on a GPU torch's, chosen by NUMPREC_AWQ_KERNEL so that nothing is built); a backend
    passed down (torch's AWQ kernel) reaches gptqmodel's selection."""
    from transformers import AutoModelForCausalLM, AwqConfig

    from harness.backends.hf_loading import linear_kernel

    path = tiny_autoawq[0]
    if HAS_CUDA:  # torch's kernel, which builds nothing: the test step never starts a Marlin build
        monkeypatch.setenv(awq_kernels.CHOICE, "torch")
    named = awq_kernels.choose(device).name
    backend = HFBackend(str(path), get_precision(get_model("smollm2"), "awq-w4"), batch_size=2)
    expected = "gptqmodel.AwqTorchLinear" if HAS_CUDA else "gptqmodel.TorchAtenAwqLinear"
    assert backend.kernel.startswith(named) and named == expected
    config = AwqConfig(bits=4, group_size=64, backend=awq_kernels.KERNELS["torch"].backend)
    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=config, device_map="cpu")
    assert linear_kernel(model) == awq_kernels.KERNELS["torch"].name


def test_an_awq_kernel_that_does_not_exist_is_one_line_before_any_work(tiny_autoawq, tmp_path):
    out = tmp_path / "run"
    result = run_module(
        "harness.eval", "--precision", "awq-w4", "--model-path", str(tiny_autoawq[0]), "--lengths", "1",
        "--samples", "2", "--out", str(out), env={"NUMPREC_AWQ_KERNEL": "exllama"},
    )  # fmt: skip
    assert_user_error(result, "NUMPREC_AWQ_KERNEL=exllama names no AWQ kernel; use one of marlin, triton, torch")
    assert not out.exists()


def decode_step_breaks(backend) -> tuple[int, torch.Tensor]:
    """Dynamo's graph breaks in one static-cache decode step of ``backend``'s model, and the step's logits."""
    from transformers import StaticCache

    kv, device = StaticCache(config=backend.model.config, max_cache_len=32), backend.device
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]], device=device)
    positions = torch.tensor([[0, 1, 2], [0, 1, 2]], device=device)
    mask = torch.zeros(2, 32, dtype=torch.long, device=device)
    mask[:, :4] = 1
    with torch.inference_mode():
        backend._forward(ids, mask, positions, kv, None)
        torch._dynamo.reset()
        step = (ids[:, :1], mask[:, :16], positions[:, -1:] + 1, kv, None, False)
        explained = torch._dynamo.explain(backend._forward_choice)(*step)
    return explained.graph_break_count, explained.graph_count


def test_an_awq_decode_step_compiles_as_one_graph(tiny_autoawq):
    """gptqmodel's GPU kernels (Marlin's op has no fake implementation) broke the compiled step once a layer; its
    layers are made one operator each (harness/backends/opaque.py). Counted by dynamo on this CPU: the AWQ model's
    step before and after, and a stand-in for such a kernel (an int4 matmul an extension registers without a fake
    implementation) that breaks the graph until its layers are made opaque."""
    from harness.backends.opaque import is_gptqmodel_kernel, make_opaque

    backend = HFBackend(str(tiny_autoawq[0]), get_precision(get_model("smollm2"), "awq-w4"), batch_size=2)
    if backend.device == "cuda":  # made opaque as the backend starts: the GPU kernel's step, as it runs
        after = decode_step_breaks(backend)
        print(f"AWQ decode step on {backend.kernel}: {after} (breaks, graphs)")
        assert backend.opaque_layers == 14 and after == (0, 1)
        return
    before = decode_step_breaks(backend)
    layers = make_opaque(backend.model, is_gptqmodel_kernel)
    after = decode_step_breaks(backend)
    print(f"AWQ decode step on the CPU: {before} -> {after} (breaks, graphs), {layers} layers opaque")
    assert layers == 14 and after == (0, 1) and before[0] == 0

    library = torch.library.Library("numprec_test_standin", "DEF")
    library.define("int4_mm(Tensor x, Tensor w) -> Tensor")
    library.impl("int4_mm", lambda x, w: torch.nn.functional.linear(x, w), "CPU")

    class StandIn(torch.nn.Linear):
        def forward(self, x):
            return torch.ops.numprec_test_standin.int4_mm(x, self.weight)

    model = torch.nn.Sequential(*(StandIn(8, 8) if i % 2 == 0 else torch.nn.ReLU() for i in range(9)))
    x = torch.randn(3, 8)
    expected = model(x)
    torch._dynamo.reset()
    assert torch._dynamo.explain(model)(x).graph_break_count > 0
    assert make_opaque(model, lambda module: isinstance(module, StandIn)) == 5
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert (explained.graph_break_count, explained.graph_count) == (0, 1)
    assert torch.equal(torch.compile(model, backend="eager")(x), expected)
