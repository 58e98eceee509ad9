"""The GPU decode path's logic, counted on the CPU (no GPU here): a step reads the static KV cache only as far as it
is filled, one compiled step serves every filled width, the shared prefix is bound once, greedy's choice is made in
the step, and every cache shape a run uses keeps its address."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.backends import Sampling
from harness.questions.answers import FreeForm
from harness.questions.problems import Task, generate
from harness.questions.prompts import user_message
from tests.harness.helpers import prompts_for

GREEDY = Sampling.named("greedy")
WRITES = {"index_copy_", "copy_", "fill_", "zero_", "index_copy", "index_put_", "slice_scatter"}


class CacheReads(TorchDispatchMode):
    """Bytes of the static KV caches' storage that operators take as inputs (their writes aside), per call."""

    def __init__(self, caches):
        super().__init__()
        self.storages = {
            layer.keys.untyped_storage().data_ptr()
            for cache in caches
            for layer in cache.layers
            if getattr(layer, "keys", None) is not None
        } | {
            layer.values.untyped_storage().data_ptr()
            for cache in caches
            for layer in cache.layers
            if getattr(layer, "values", None) is not None
        }
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func.__name__.split(".")[0] not in WRITES:
            for arg in args:
                if isinstance(arg, torch.Tensor) and arg.untyped_storage().data_ptr() in self.storages:
                    self.bytes += arg.numel() * arg.element_size()
        return func(*args, **(kwargs or {}))


def static_backend(tiny_llama, rows: int = 4):
    from harness.backends.hf import HFBackend
    from harness.models import get_model, get_precision

    backend = HFBackend(str(tiny_llama), get_precision(get_model("smollm2"), "fp32"), batch_size=rows)
    # the static path, eager (on a GPU too: what is counted here is the path's logic, not CUDA graphs)
    backend.static_decode, backend.graphs, backend._step = True, False, None
    return backend


def test_a_decode_step_reads_the_cache_only_as_far_as_it_is_filled(tiny_llama):
    """Bytes of cache read per step, two budgets apart (setup and prefill cancel), against reading the whole cache:
    the cache of this batch holds 128 positions a row; over the 40 steps measured the filled width is 86-126, so a
    step reads about 106 of them (the path before read all 128 every step)."""
    from harness.backends import hf

    backend = static_backend(tiny_llama)
    _, prompts = prompts_for(backend, Task("add"), 2, 4, seed=7)
    run_on, config = FreeForm(128), backend.model.config
    ids, prefix, _ = backend.prepare(prompts, [0] * len(prompts))
    width = max(len(row) - len(prefix) for row in ids)
    budgets = (86 - width, 126 - width)  # both fill a cache of 128 positions, past its first 64
    backend.generate(prompts, budgets[0], GREEDY, answer=run_on)  # makes the cache of this shape
    ((shape, cache),) = backend._static_caches.items()
    per_position = (
        2
        * config.num_hidden_layers
        * config.num_key_value_heads
        * 4
        * (config.hidden_size // config.num_attention_heads)
    )  # keys and values, every layer, float32
    measured = {}
    for budget in budgets:
        reads = CacheReads([cache])
        with reads:
            backend.generate(prompts, budget, GREEDY, answer=run_on)
        measured[budget] = reads.bytes
    per_step = (measured[budgets[1]] - measured[budgets[0]]) / 40
    whole = shape[0] * shape[1] * per_position
    print(f"cache bytes read per step: {per_step:,.0f} against {whole:,} for the whole cache ({shape})")
    assert 0.6 * whole < per_step <= 0.9 * whole
    assert hf.BUCKET == 16 and shape[1] == 128


def test_every_filled_width_replays_one_compiled_step_and_the_prefix_is_bound_once(tiny_llama, monkeypatch):
    """The step compiled (dynamo counting its compilations) over a batch whose filled width crosses several
    buckets: one compilation; the shared prefix's tensors marked once when computed, not at every step; greedy's
    tokens (not the vocabulary's logits) are what the compiled step returns."""
    from torch._dynamo.testing import CompileCounter

    backend = static_backend(tiny_llama)
    counter = CompileCounter()
    backend.graphs = True
    backend._step = torch.compile(backend._forward_choice, backend=counter, dynamic=False)
    marked, returned = [], []
    original_mark = torch._dynamo.mark_dynamic
    monkeypatch.setattr(torch._dynamo, "mark_dynamic", lambda t, *a, **k: (marked.append(t), original_mark(t, *a, **k)))
    step = backend._step
    backend._step = lambda *args: returned.append(step(*args)) or returned[-1]
    _, prompts = prompts_for(backend, Task("add"), 2, 4, seed=7, style="few-shot")  # its cache widths are counted
    texts = [g.text for g in backend.generate(prompts, 40, GREEDY, answer=FreeForm(64))]
    widths = {t.shape[1] for t in marked if t.dim() == 2}
    prefix_marks = [t for t in marked if t.dim() == 4]
    assert len(widths) >= 3, widths  # the filled width crossed buckets
    assert counter.frame_count == 1, "one compilation for every width"
    assert len(prefix_marks) == 2 * backend.model.config.num_hidden_layers, "the prefix marked once, not per step"
    assert all(out.dim() == 1 and out.dtype == torch.long for out in returned), "greedy's tokens leave the graph"
    # a second template whose shared prefix has another length (the chain-of-thought prompt's), in the same cache
    # shape (slots x positions, a shape compiles once): nothing new compiles
    shapes = set(backend.compile_seconds)
    problems = generate(Task("add"), 10, 2, 4, 7)
    thinking = [backend.chat_prompt(user_message(problem, "cot")) for problem in problems]
    prefix = [len(backend.tokenizer(text, add_special_tokens=False)["input_ids"]) for text in (prompts[0], thinking[0])]
    assert prefix[0] != prefix[1], prefix
    backend.generate(thinking, 8, GREEDY, answer=FreeForm(64))
    assert set(backend.compile_seconds) == shapes, "the same cache shape"
    assert counter.frame_count == 1, "another prefix length compiled the step again"
    backend.graphs, backend._step = False, None
    assert [g.text for g in backend.generate(prompts, 40, GREEDY, answer=FreeForm(64))] == texts


def test_every_cache_shape_a_run_uses_keeps_its_address(tiny_llama):
    """Three shapes one after another and the first again: its cache is the same tensors (a CUDA graph captured over
    it replays), where the path before kept two and made the first again."""
    backend = static_backend(tiny_llama, rows=8)
    addresses = []
    for rows, budget in ((8, 8), (4, 8), (2, 8), (8, 8)):
        _, prompts = prompts_for(backend, Task("add"), 1, rows, seed=rows)
        backend.batch_size = rows
        backend.generate(prompts, budget, GREEDY)
        size = 1 << (rows - 1).bit_length()
        cache = next(c for (slots, _), c in backend._static_caches.items() if slots == size)
        addresses.append(cache.layers[0].keys.data_ptr())
    assert len(backend._static_caches) == 3 and addresses[0] == addresses[3]
