"""harness/models/activation_qdq.py: a layer input quantized and dequantized by the compiled path is bit for bit what
compressed-tensors' eager code gives, for every format whose activation scales are found per group at run time
(NVFP4's groups under a global scale, MX's power-of-two scales, FP8 blocks), at prefill and decode shapes; a model's
layers run it once installed; other row counts and input widths do not compile again; per-token formats, weights and
static scales keep the library's path."""

from __future__ import annotations

import pytest
import torch
from compressed_tensors.quantization import (
    QuantizationConfig,
    QuantizationScheme,
    apply_quantization_config,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.lifecycle import forward

from harness.models import activation_qdq, fp4

fp4.register()


@pytest.fixture(autouse=True)
def compiled_from_the_first_call():
    """Each test here takes the compiled path from its first call (a run takes it after COMPILE_AFTER values)."""
    activation_qdq.install(compile_after=0)
    yield
    activation_qdq.install(compile_after=activation_qdq.COMPILE_AFTER)


WIDTH = 256  # a multiple of every format's group (16, 32, 128)
GROUP_PRESETS = ["FP8_BLOCK", "NVFP4", "MXFP4", "MXFP8"]


def activations(rows: int, seed: int) -> torch.Tensor:
    """Inputs over a wide range of magnitudes (whole groups of tiny values, large outliers), with exact zeros of
    both signs."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.exp(3 * torch.randn(rows, WIDTH, generator=generator))
    values = torch.randn(rows, WIDTH, generator=generator) * scales
    values[0, :32] = 0.0
    values[-1, 5] = -0.0
    values[-1, 40:48] = 1e-30
    return values.to(torch.bfloat16)


class Layer(torch.nn.Module):
    quantization_status = None


def same_bits(first: torch.Tensor, second: torch.Tensor) -> bool:
    return first.dtype == second.dtype and torch.equal(first.view(torch.int16), second.view(torch.int16))


@pytest.mark.parametrize("preset", GROUP_PRESETS)
def test_each_format_equals_the_eager_library_bit_for_bit(preset):
    args = preset_name_to_scheme(preset, ["Linear"]).input_activations
    layer = Layer()
    if preset == "NVFP4":
        layer.input_global_scale = torch.tensor([448.0 * 6.0 / 37.5])
    library = activation_qdq.library_forward_quantize()
    for seed, shape in enumerate([(4, 30, WIDTH), (4, 1, WIDTH), (1, 1, WIDTH), (3, 7, WIDTH)]):
        value = activations(shape[0] * shape[1], seed).reshape(shape)
        assert activation_qdq.applies(value, "input", args)
        expected = library(layer, value, "input", args)
        got = forward.forward_quantize(layer, value, "input", args)
        assert same_bits(got, expected), f"{preset} at {shape}: {(got != expected).sum()} values differ"
        assert not torch.equal(got, value)  # the input was quantized, not passed through


def test_a_models_layers_run_the_compiled_path_and_other_shapes_do_not_compile_again():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH, bias=False), torch.nn.Linear(WIDTH, WIDTH, bias=False))
    model = model.to(torch.bfloat16)
    inputs_only = QuantizationScheme(
        targets=["Linear"], input_activations=preset_name_to_scheme("MXFP4", ["Linear"]).input_activations
    )  # the weights stay bfloat16, so that the layer's output shows its input's quantization alone
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": inputs_only}))
    eager = Layer()
    library = activation_qdq.library_forward_quantize()
    reference = model[0].weight.detach()
    with torch.no_grad():
        model(activations(8, 0).reshape(2, 4, WIDTH))  # the first call loads (or builds) the kernel for this group
        kernels = dict(activation_qdq._kernels)
        args = model[0].quantization_scheme.input_activations
        assert activation_qdq.compiled(args)  # the layer's own args went through the compiled path
        for rows in (1, 3, 17, 40):
            value = activations(rows, rows)
            out = model[0](value)
            expected = torch.nn.functional.linear(library(eager, value, "input", args), reference)
            assert same_bits(out, expected)
        wider = activations(6, 1).reshape(3, 2 * WIDTH)
        assert same_bits(activation_qdq.quantize_dequantize(wider, None, args), library(eager, wider, "input", args))
        assert activation_qdq._kernels == kernels  # one kernel for every row count and width


@pytest.fixture
def no_kernel_built(monkeypatch, tmp_path):
    """A cache that holds no kernel yet, so that the threshold decides when one is built."""
    monkeypatch.setenv("NUMPREC_CACHE", str(tmp_path))


def test_a_run_compiles_only_once_its_eager_work_would_pay_for_it(monkeypatch, no_kernel_built, tmp_path):
    """Below the threshold the library's eager path runs and the values are counted; past it, the kernel is built
    (into the cache) and run."""
    monkeypatch.setitem(activation_qdq._state, "eager", 0)
    monkeypatch.setitem(activation_qdq._state, "per_row", 0)  # no model said what a forward brings
    activation_qdq.install(compile_after=2 * 8 * WIDTH)
    args, layer = preset_name_to_scheme("MXFP4", ["Linear"]).input_activations, Layer()  # args of its own
    for calls in (1, 2):
        forward.forward_quantize(layer, activations(8, calls), "input", args)
        assert activation_qdq._state["eager"] == calls * 8 * WIDTH and not activation_qdq.compiled(args)
    assert not (tmp_path / "qdq-kernels").exists()
    forward.forward_quantize(layer, activations(8, 3), "input", args)
    assert activation_qdq.compiled(args) and activation_qdq._state["eager"] == 2 * 8 * WIDTH
    assert len(list((tmp_path / "qdq-kernels").glob("*.pt2"))) == 1


def input_quantized(layers: int, preset: str) -> torch.nn.Module:
    """``layers`` bfloat16 linear layers whose inputs (only) ``preset`` quantizes, each with args of its own."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)))
    inputs_only = QuantizationScheme(
        targets=["Linear"], input_activations=preset_name_to_scheme(preset, ["Linear"]).input_activations
    )
    apply_quantization_config(model.to(torch.bfloat16), QuantizationConfig(config_groups={"group_0": inputs_only}))
    return model


def test_a_forward_that_brings_a_compiles_worth_compiles_at_its_first_layer(monkeypatch, no_kernel_built):
    """expect(model): the values a forward quantizes a row; rows that bring the threshold's worth compile at once."""
    model = input_quantized(2, "MXFP4")
    monkeypatch.setitem(activation_qdq._state, "eager", 0)
    activation_qdq.expect(model)
    assert activation_qdq._state["per_row"] == 2 * WIDTH
    activation_qdq.install(compile_after=10 * WIDTH)
    args = model[0].quantization_scheme.input_activations
    with torch.inference_mode():
        model[0](activations(4, 0))  # 4 rows bring 8 widths: eager, counted
        assert activation_qdq._state["eager"] == 4 * WIDTH and not activation_qdq.compiled(args)
        model[0](activations(8, 1))  # 8 rows bring 16: past the threshold before any of it is quantized
        assert activation_qdq.compiled(args) and activation_qdq._state["eager"] == 10 * WIDTH


@pytest.mark.parametrize("compile_after", [0, 10**12], ids=["compiled", "eager"])
def test_layers_given_one_input_quantize_it_once_and_a_changed_one_again(monkeypatch, compile_after, request):
    """q, k and v (gate and up) take one tensor: it is quantized once and the three get the same bits as the
    library's; the tensor changed in place (inference tensors keep no version) is quantized again."""
    if compile_after:
        request.getfixturevalue("no_kernel_built")  # none on disk: the library's eager path, counted
    model = input_quantized(3, "NVFP4")
    for layer in model:
        layer.input_global_scale.data.fill_(448.0 * 6.0 / 37.5)  # each layer's own, equal (as fused layers' are)
    monkeypatch.setitem(activation_qdq._state, "eager", 0)
    monkeypatch.setitem(activation_qdq._state, "per_row", 0)
    activation_qdq.install(compile_after=compile_after)
    library, reference = activation_qdq.library_forward_quantize(), Layer()
    reference.input_global_scale = model[0].input_global_scale
    args = model[0].quantization_scheme.input_activations
    quantized, copies = [], count_copies(monkeypatch)
    original = activation_qdq._run
    monkeypatch.setattr(activation_qdq, "_run", lambda *a: quantized.append(1) or original(*a))
    with torch.inference_mode():
        value = activations(8, 0)
        for round_ in (1, 2):
            outputs = [layer(value) for layer in model]
            expected = library(reference, value, "input", args)
            for layer, output in zip(model, outputs, strict=True):
                assert same_bits(output, torch.nn.functional.linear(expected, layer.weight))
            work = len(quantized) if compile_after == 0 else activation_qdq._state["eager"] // (8 * WIDTH)
            assert work == round_, "once for the three layers"
            assert len(copies) == round_  # the first layer's input, copied to be compared
            value.mul_(3)  # the same tensor, changed in place


def count_copies(monkeypatch) -> list:
    copies = []
    original = activation_qdq._snapshot
    monkeypatch.setattr(activation_qdq, "_snapshot", lambda value: copies.append(1) or original(value))
    return copies


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad], ids=["inference", "no_grad"])
def test_layers_whose_input_goes_to_no_other_keep_no_copy_after_the_first_forward(monkeypatch, mode):
    """In a chain (o_proj, down_proj: each layer's input its own) a copy of the input is made at each layer's first
    call only; once the next layer is seen to take another input, none; every output still the library's bits."""
    model = input_quantized(3, "MXFP4")
    monkeypatch.setitem(activation_qdq._state, "per_row", 0)
    library, reference = activation_qdq.library_forward_quantize(), Layer()
    copies = count_copies(monkeypatch)
    with mode():
        for forward_ in (1, 2, 3):
            value = activations(8, forward_)
            for layer in model:
                expected = torch.nn.functional.linear(
                    library(reference, value, "input", layer.quantization_scheme.input_activations), layer.weight
                )
                value = layer(value)
                assert same_bits(value, expected)
            assert len(copies) == 3, f"forward {forward_}: copies at the first forward only"


def test_an_input_that_requires_grad_is_left_to_the_library():
    """The compiled kernel has no backward (its output would silently leave the autograd graph): an input that
    requires grad is quantized by the library at each layer, in its graph."""
    model = input_quantized(2, "MXFP4")
    activation_qdq.install(compile_after=0)
    args = model[0].quantization_scheme.input_activations
    value = activations(8, 0).requires_grad_()
    assert not activation_qdq.applies(value, "input", args)
    expected = activation_qdq.library_forward_quantize()(Layer(), value, "input", args)
    for layer in model:
        output = layer(value)
        assert output.requires_grad and same_bits(output, torch.nn.functional.linear(expected, layer.weight))
    assert not activation_qdq.compiled(args)


def test_a_machine_where_compiling_fails_keeps_the_librarys_path_and_says_so_once(
    monkeypatch, no_kernel_built, tmp_path, capsys
):
    """No C++ compiler (inductor pointed at none, with a cache of its own so that nothing built before is reused):
    the build fails, one line says so, and each layer's input is quantized by the library, bit for bit."""
    import torch._inductor.config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setitem(activation_qdq._state, "failed", None)
    model = input_quantized(1, "MXFP4")
    args = model[0].quantization_scheme.input_activations
    library = activation_qdq.library_forward_quantize()
    with torch._inductor.config.patch({"cpp.cxx": ("/nonexistent/c++",)}), torch.no_grad():
        for rows in (4, 8):
            value = activations(rows, rows)
            expected = torch.nn.functional.linear(library(Layer(), value, "input", args), model[0].weight)
            assert same_bits(model[0](value), expected)
    said = capsys.readouterr().err
    assert said.count("numprec: activations quantized in eager torch (compiling failed") == 1, said
    assert "compiling failed" in activation_qdq.kernel("cpu") and not activation_qdq.compiled(args)


def test_weights_other_devices_per_token_and_static_scales_keep_the_library_path():
    args = preset_name_to_scheme("NVFP4", ["Linear"]).input_activations
    value = activations(4, 0)
    assert activation_qdq.applies(value, "input", args)
    assert not activation_qdq.applies(value, "weight", args)
    assert not activation_qdq.applies(value.to("meta"), "input", args)
    for preset in ("FP8_DYNAMIC", "W8A8", "FP8"):  # per token at run time; FP8's is a calibrated, static scale
        assert not activation_qdq.applies(value, "input", preset_name_to_scheme(preset, ["Linear"]).input_activations)


def test_a_decode_sized_input_runs_on_one_thread_and_gives_the_same_bits(monkeypatch):
    """Below ONE_THREAD values the kernel runs with one thread, the count given back after; the bits are those of
    the same kernel on two threads (each group is reduced within one iteration)."""
    args = preset_name_to_scheme("NVFP4", ["Linear"]).input_activations
    scale = torch.tensor([448.0 * 6.0 / 37.5])
    value = activations(40, 3)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    counts = []
    set_threads = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda count: (counts.append(count), set_threads(count))[1])
    try:
        alone = activation_qdq.quantize_dequantize(value, scale, args)
        assert counts == [1, 2] and torch.get_num_threads() == 2
        monkeypatch.setattr(activation_qdq, "ONE_THREAD", 0)
        both = activation_qdq.quantize_dequantize(value, scale, args)
        assert counts == [1, 2]  # the same input above the limit: two threads, the count untouched
    finally:
        set_threads(before)
    assert same_bits(alone, both)
    layer = Layer()
    layer.input_global_scale = scale
    assert same_bits(alone, activation_qdq.library_forward_quantize()(layer, value, "input", args))
