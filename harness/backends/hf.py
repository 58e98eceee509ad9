"""The transformers backend: batched generation that computes the shared few-shot prefix once.

Every prompt of a cell is ``<chat header + few-shot prompt> <expression> <chat footer>``. The longest
common token prefix of the prompts is run through the model once; each batch then reuses a copy of that
KV cache and only feeds its own suffix. Suffixes are left-padded *after* the prefix (prefix, pads,
suffix); the attention mask hides the pads and position ids come from the mask, as in generate(), so
each row sees exactly the positions it would see unpadded. Decoding is our own short loop rather than
generate(), so that a row leaves the batch (and the KV cache) as soon as it has answered.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections import OrderedDict

import numpy as np
import torch
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, StaticCache

from harness.backends import (
    ChatBackend,
    Generation,
    LoadRequest,
    Sampling,
    feedable_prefix,
    kv_cache,
    read_every,
    shared_prefix,
    widened_bf16,
)
from harness.backends.emulated import emulated_matmul, emulation_note, loaded_formats
from harness.backends.fp8_linear import KERNEL as FP8_KERNEL
from harness.backends.fp8_linear import fp8_matmuls, has_fp8_matmul, use_fp8_matmuls
from harness.backends.hf_loading import (
    KERNEL_ACTIVATION_DTYPE,
    linear_kernel,
    load_kwargs,
    store_linear_weights_transposed,
    with_adapter,
)
from harness.backends.opaque import is_gptqmodel_kernel, make_opaque
from harness.backends.sampling import gumbel_choice, warped_candidates
from harness.backends.static_cache import BUCKET, FilledMask, bind_once
from harness.core.errors import one_line
from harness.models import PrecisionSpec, activation_qdq, rotations
from harness.models.checkpoints import Checkpoint
from harness.models.mix import check_loaded
from harness.questions.answers import FIRST_LINE, AnswerMode, finishing_tokens


class HFBackend(ChatBackend):
    @classmethod
    def load(cls, request: LoadRequest) -> HFBackend:
        return cls(
            request.weights,
            request.precision,
            adapter=request.adapter,
            batch_size=request.batch_size,
            checkpoint=request.checkpoint,
        )

    name = "hf"

    def __init__(
        self,
        weights: str,
        precision: PrecisionSpec,
        adapter: str | None = None,
        batch_size: int = 16,
        threads: int | None = None,
        checkpoint: Checkpoint | None = None,
    ):
        torch.set_num_threads(threads or int(os.environ.get("NUMPREC_THREADS", torch.get_num_threads())))
        device = "cuda" if torch.cuda.is_available() else "cpu"
        kwargs = load_kwargs(precision, device, weights, checkpoint)
        model = AutoModelForCausalLM.from_pretrained(weights, **kwargs).eval()
        # rotations the checkpoint declares and transformers leaves out (QuIP's, harness/models/rotations.py)
        self.rotated_layers = rotations.apply(model, weights) if precision.method == "compressed" else 0
        if adapter:
            # Fold LoRA into unquantized weights (same outputs, no adapter overhead); a 4-bit base keeps it apart,
            # as merging would requantize the base.
            model = with_adapter(model, adapter, merge=precision.method == "cast")
        self._setup(model, AutoTokenizer.from_pretrained(weights), precision, batch_size)

    @classmethod
    def from_model(cls, model, tokenizer, precision: PrecisionSpec, batch_size: int) -> HFBackend:
        """A backend over a model already in memory, on its device (the GPU bench's random-init 8B architecture,
        which is never written to disk). The caller's layers keep their classes: its bf16 layers are not widened
        (harness/backends/widened_bf16.py), as the benches go on to rewrite them (FP8 rounding, mixing)."""
        backend = cls.__new__(cls)
        backend.rotated_layers = 0
        backend._setup(model.eval(), tokenizer, precision, batch_size, widen=False)
        return backend

    def _setup(self, model, tokenizer, precision: PrecisionSpec, batch_size: int, widen: bool = True) -> None:
        self.model, self.tokenizer, self.precision, self.batch_size = model, tokenizer, precision, batch_size
        self.loaded_layers = loaded_formats(model) if precision.layer_formats else None
        if self.loaded_layers is not None:
            check_loaded(precision, self.loaded_layers, "transformers", lambda fmt: fmt)
        self.device = model.device.type
        if precision.method == "compressed":
            activation_qdq.expect(model)  # a forward's values a row: a batch that pays for a compile compiles at once
        widenable = widen and self.model.dtype == torch.bfloat16 and precision.method in widened_bf16.METHODS
        if widenable and widened_bf16.wanted(self.device) and widened_bf16.fits(self.model):
            widened_bf16.widen_when_decompressed(self.model)  # no bf16 instructions: float32's GEMM, bf16's values
            shared_prefix.products_in_float32(self.model)  # and the decoding steps' attention products
        if precision.method == "cast" and self.device == "cpu":
            store_linear_weights_transposed(self.model)
        # FP8 tensor cores where the card has them; every other format (and FP8 elsewhere) runs emulated
        if has_fp8_matmul(self.device):
            use_fp8_matmuls(self.model)
        # Our attention keeps the shared prefix once for all rows (harness/backends/shared_prefix.py).
        self.model.set_attn_implementation(shared_prefix.NAME)
        if precision.kv_cache == "fp8" and kv_cache.use_fp8_cache(self.model):
            self.kv_cache = kv_cache.NOTE
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id
        self._prefixes: OrderedDict[tuple[int, ...], DynamicCache] = OrderedDict()
        self._stop_ids = self._end_of_sequence_table()
        self._ends = self._stop_ids.numpy()
        self._finishing: dict[AnswerMode, np.ndarray] = {}  # per answer mode: may a token finish an answer
        # The static path's host reads the chosen tokens of this many steps at once (harness/backends/hf.py)
        self.read_every = read_every()
        # On a GPU a decode step is bound by reading the weights and by launching hundreds of small kernels: there
        # every row stays in a static KV cache and the step is one CUDA graph. On a CPU, compute-bound, finished
        # rows leave the batch instead (the dynamic path).
        self.static_decode = self.device == "cuda"
        self.graph_error: str | None = None
        self._static_caches: OrderedDict[tuple[int, int], StaticCache] = OrderedDict()
        if self.device == "cuda" and self.activation_dtype == "float32":
            # fp32 means IEEE float32: TF32 (a 10-bit mantissa) off, whatever an imported library set.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.set_float32_matmul_precision("highest")
        self.graphs = self.device == "cuda"  # the static path's steps run as CUDA graphs (else eagerly: tests)
        self.compile_seconds: dict[tuple[int, int], float] = {}  # per step shape: its first call (compiling)
        # When a list (the bench's), the dynamic path appends the clock as each step's tokens reach the host
        self.step_clock: list[float] | None = None
        self._step = None
        # quantized layers made one operator each in the compiled step (harness/backends/opaque.py)
        self.opaque_layers = 0
        if self.graphs:
            self.opaque_layers = make_opaque(self.model, is_gptqmodel_kernel)
            self._step = torch.compile(self._forward_choice, mode="reduce-overhead", dynamic=False)
            # One graph per (slots, cache length): up to 9 x a few shapes, above dynamo's default of 8 recompiles.
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)

    @property
    def footprint_mb(self) -> float:
        return self.model.get_memory_footprint() / 2**20

    @property
    def kernel(self) -> str:
        """The linear layers' kernel class, and on a GPU whether the decode steps ran as CUDA graphs (inductor's
        fused kernels, whose rounding can differ from eager's) or, after a compiler failure, eagerly."""
        graphs = "; decode steps as CUDA graphs (torch.compile, inductor)" if self.static_decode and self.graphs else ""
        opaque = f", {self.opaque_layers} quantized layers one operator each" if graphs and self.opaque_layers else ""
        fp8_layers = fp8_matmuls(self.model)
        if fp8_layers:
            return f"{FP8_KERNEL}, {fp8_layers} layers{graphs}"
        if self.precision.method == "compressed":
            rotated = f"; {self.rotated_layers} layers rotated as declared (QuIP)" if self.rotated_layers else ""
            return emulation_note(self.model, self.precision) + rotated + graphs
        return linear_kernel(self.model) + graphs + opaque

    @property
    def activation_dtype(self) -> str:
        return KERNEL_ACTIVATION_DTYPE.get(linear_kernel(self.model), self.precision.activation_dtype)

    @property
    def matmul_precision(self) -> str:
        if fp8_matmuls(self.model):
            return "float8_e4m3fn x float8_e4m3fn, float32 accumulation"
        widened = widened_bf16.widened_layers(self.model) > 0
        if self.precision.method == "compressed":
            return emulated_matmul(self.precision, widened)
        if widened:
            return widened_bf16.MATMUL_PRECISION
        return super().matmul_precision

    def prepare(self, prompts: list[str], budgets: list[int]):
        """Token ids of every prompt, their shared prefix and its keys and values (computed once)."""
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        prefix = feedable_prefix(ids)
        return ids, prefix, self._prefix_cache(prefix)

    def generate_batch(
        self,
        shared,
        rows: slice,
        budgets: list[int],
        sampling: Sampling,
        seeds: list[int],
        answer: AnswerMode = FIRST_LINE,
    ):
        ids, prefix, cache = shared
        return self._generate_batch(prefix, cache, ids[rows], budgets, sampling, seeds, answer)

    def _prefix_cache(self, prefix: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Keys and values of the shared prefix, per layer, computed once (a few cells' worth are kept)."""
        if not prefix:
            return None
        key = tuple(prefix)
        if key not in self._prefixes:
            cache = kv_cache.written_as_fp8(DynamicCache(config=self.model.config), self.model)
            with torch.inference_mode():  # keys and values: the head at one position, not all ~200
                ids = torch.tensor([prefix], device=self.device)
                self.model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            self._prefixes[key] = [(layer.keys, layer.values) for layer in cache.layers]
            if self.graphs:
                bind_once(self._prefixes[key])
            while len(self._prefixes) > 4:
                self._prefixes.popitem(last=False)
        self._prefixes.move_to_end(key)
        return self._prefixes[key]

    def _generate_batch(self, prefix, cache, batch, budgets, sampling, seeds, answer) -> list[Generation]:
        # Only the rows' own tokens enter the batch: left-padded suffixes, positions continuing after the prefix.
        width = max(len(x) - len(prefix) for x in batch)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, tokens in enumerate(batch):
            suffix = tokens[len(prefix) :]
            input_ids[row, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
            attention[row, width - len(suffix) :] = 1
        kv = kv_cache.written_as_fp8(DynamicCache(config=self.model.config), self.model)
        positions = len(prefix) + (attention.cumsum(-1) - 1).clamp(min=0)
        sampler = None
        if sampling.do_sample:
            sampler = (sampling, torch.tensor(seeds, dtype=torch.long, device=self.device))
        generated = None
        if self.static_decode:
            try:
                generated = self._decode_static(
                    input_ids, attention, positions, len(prefix), budgets, sampler, cache, answer
                )
            except Exception as err:  # noqa: BLE001 (a compiler failure must not end what eager decoding can do)
                if not self.graphs:
                    raise
                self.graph_error = one_line(err)
                warnings.warn(f"CUDA graph decoding failed ({self.graph_error}); decoding eagerly", stacklevel=2)
                self.static_decode = self.graphs = False
        if generated is None:  # the batch again from its start, on the dynamic path
            generated = self._decode(kv, input_ids, attention, positions, len(prefix), budgets, sampler, cache, answer)
        return [
            Generation(
                text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                tokens=len(tokens),
                finished=bool(tokens) and bool(self._stop_ids[tokens[-1]]) or None,  # an end of turn; else judged
            )
            for tokens in generated
        ]

    def _decode(
        self, kv, input_ids, attention, positions, prefix_length, budgets, sampler, prefix_kv, answer
    ) -> list[list[int]]:
        """Token by token; a row leaves the batch (and the KV cache) as soon as it stops: rows finish at very
        different lengths ("7" vs "To calculate ..."), and generate() would keep computing finished ones.

        Each step costs one transfer to the host (the chosen tokens). The stop rule is decided on token ids: the
        end-of-sequence ids, the budgets, and a table of the tokens that contain a newline; only a row that
        produced such a token has its text decoded, to see whether its first non-blank line is complete."""
        rows = len(input_ids)
        stop = _HostStop(self, rows, max(budgets), budgets, answer)
        active = torch.arange(rows)  # batch rows still generating, in KV-cache order (the stop's running rows)
        with torch.inference_mode():
            step_ids, step_positions = input_ids, positions
            for step in range(max(budgets)):
                logits = self._forward(
                    step_ids.to(self.device),
                    attention.to(self.device),
                    step_positions.to(self.device),
                    kv,
                    prefix_kv,
                )
                chosen = self._choose(logits, sampler, active, step).cpu()  # the step's one host synchronisation
                if self.step_clock is not None:
                    self.step_clock.append(time.perf_counter())
                done = torch.from_numpy(stop.step(chosen.numpy()))
                if bool(done.all()):
                    break
                if bool(done.any()):
                    keep = torch.nonzero(~done).flatten()
                    kv.batch_select_indices(keep.to(self.device))
                    attention, chosen, active = attention[keep], chosen[keep], active[keep]
                attention = torch.cat([attention, torch.ones((len(active), 1), dtype=torch.long)], dim=1)
                step_ids = chosen.view(-1, 1)
                step_positions = prefix_length + attention.sum(-1, keepdim=True) - 1
        return stop.generated()

    def _decode_static(self, input_ids, attention, positions, prefix_length, budgets, sampler, prefix_kv, answer):
        """The GPU path: every row keeps its slot in a static KV cache until all have stopped, so each decode step
        has one shape (rows, cache length) and runs as one captured CUDA graph; a stopped row's further tokens
        are computed and ignored (on a GPU a step costs the weights' reading, whatever the rows). Same stop rule
        and sampling as ``_decode``, whose answers it gives (tested on CPU).

        No step waits for the host: the chosen tokens stay on the device, each step's positions and mask are made
        there, and the host reads the tokens of ``read_every`` steps at once (one transfer) to apply the stop rule
        step by step, as ``_decode`` does; the device runs at most ``read_every - 1`` steps past the last row's
        stop, and their tokens are never read."""
        rows, width = input_ids.shape
        steps = max(budgets)
        # Few shapes, so few graphs serve every cell: slots a power of two (the spare ones repeat the last row and
        # are never read), cache lengths a multiple of 64.
        size, length = 1 << (rows - 1).bit_length(), -(-(width + steps) // 64) * 64
        slots = torch.cat([torch.arange(rows), torch.full((size - rows,), rows - 1)])  # slot -> row
        input_ids, attention, positions = input_ids[slots], attention[slots], positions[slots]
        # BUCKET spare columns: every view a step reads (up to the cache's length) has the same row stride, so the
        # compiled step's guards see one layout whatever the width
        mask = torch.zeros((size, length + BUCKET), dtype=torch.long, device=self.device)
        mask[:, :width] = attention.to(self.device)
        chosen_steps = torch.zeros((size, steps), dtype=torch.long, device=self.device)
        if sampler is not None:  # each slot's problem seed, on the device once
            sampler = (sampler[0], sampler[1][slots.to(sampler[1].device)])
        stop = _HostStop(self, rows, steps, budgets, answer)
        with torch.inference_mode():
            kv = self._static_cache(size, length)
            # The suffixes (their width varies from batch to batch) are fed eagerly; the steps after, in the graph.
            logits = self._forward(
                input_ids.to(self.device), mask[:, :length], positions.to(self.device), kv, prefix_kv
            )
            chosen = self._choose(logits, sampler, None, 0)
            step_positions = positions[:, -1:].to(self.device)
            filled = FilledMask(mask, length, self.graphs)
            read = 0  # steps whose tokens the host has read
            for step in range(steps):
                chosen_steps[:, step] = chosen
                if step + 1 - read >= self.read_every or step + 1 == steps:
                    # the host's one read of these steps: their tokens, the stop rule applied step by step
                    if stop.read(chosen_steps[:rows, read : step + 1].numpy(force=True)):
                        break
                    read = step + 1
                if step + 1 == steps:
                    break
                mask[:, width + step] = 1
                step_positions = step_positions + 1
                step_mask = filled.up_to(width + step + 1)  # the cache is read only as far as it is filled
                chosen = self._graph_step(
                    chosen.view(-1, 1), step_mask, step_positions, kv, prefix_kv, sampler, step + 1
                )
        return stop.generated()

    def _static_cache(self, size: int, length: int) -> StaticCache:
        """The static KV cache of this shape, emptied: kept for the backend's life at one address, so the graphs
        captured over it replay whatever shape came between (a run uses a few shapes: slots x cache length). It
        holds BUCKET positions more than a step ever reads, so that no step reads all of it: every width a step
        reads is then the same kind of view, and the compiled step's guards hold for all."""
        kv = self._static_caches.get((size, length))
        if kv is None:
            capacity = length + BUCKET
            kv = StaticCache(config=self.model.config, max_cache_len=capacity)
            kv = self._static_caches[(size, length)] = kv_cache.written_as_fp8(kv, self.model)
        kv.reset()
        return kv

    def _forward(self, input_ids, attention_mask, position_ids, kv, prefix_kv) -> torch.Tensor:
        """The last position's logits, in float32."""
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=kv,
            use_cache=True,
            logits_to_keep=1,
            shared_prefix=prefix_kv,  # handed down to shared_prefix_attention
        )
        return output.logits[:, -1, :].float()

    def _forward_choice(self, input_ids, attention_mask, position_ids, kv, prefix_kv, greedy: bool) -> torch.Tensor:
        """A decode step: greedy's chosen tokens (the argmax in the step's graph: the logits never leave it), or the
        logits for the sampler."""
        logits = self._forward(input_ids, attention_mask, position_ids, kv, prefix_kv)
        return logits.argmax(-1) if greedy else logits

    def _graph_step(self, input_ids, attention_mask, position_ids, kv, prefix_kv, sampler, step: int) -> torch.Tensor:
        """The tokens a decode step chooses, its model call compiled into a CUDA graph where graphs are on."""
        greedy = sampler is None
        if not self.graphs:
            return self._choose(self._forward_choice(input_ids, attention_mask, position_ids, kv, prefix_kv, False),
                                sampler, None, step)  # fmt: skip
        shape = (input_ids.shape[0], kv.layers[0].max_cache_len - BUCKET)  # the step's shape: slots, cache length
        first = shape not in self.compile_seconds
        if first:  # compiling takes a while on its first call: said, not silent (kept for the next process)
            tqdm.write(
                f"compiling the decode step for {shape[0]} rows x {shape[1]} positions (once per shape; "
                f"torch.compile's cache: {os.environ.get('TORCHINDUCTOR_CACHE_DIR', 'its default')})",
                file=sys.stderr,
            )
            started = time.perf_counter()
        torch.compiler.cudagraph_mark_step_begin()
        # A copy: the graph's output buffer is overwritten by its next replay (greedy: the tokens, a few bytes).
        out = self._step(input_ids, attention_mask, position_ids, kv, prefix_kv, greedy).clone()
        if first:
            if self.device == "cuda":
                torch.cuda.synchronize()
            self.compile_seconds[shape] = time.perf_counter() - started
            tqdm.write(f"compiled the decode step in {self.compile_seconds[shape]:.1f} s", file=sys.stderr)
        return out if greedy else self._choose(out, sampler, None, step)

    def _choose(self, logits: torch.Tensor, sampler, slots: torch.Tensor | None, step: int) -> torch.Tensor:
        """Greedy argmax, or the paper's sampling with each row's own seeded noise (``slots``: the rows' seeds'
        indices; None where the sampler's seeds are the rows' already)."""
        if sampler is None:
            return logits.argmax(-1)
        sampling, seeds = sampler
        values, candidates = warped_candidates(logits, sampling.temperature, sampling.top_k, sampling.top_p)
        return gumbel_choice(values, candidates, seeds if slots is None else seeds[slots.to(seeds.device)], step)

    def _stop_tables(self, answer: AnswerMode) -> tuple[np.ndarray, np.ndarray]:
        """Per token id, as numpy arrays: does it end a sequence, and may it finish an answer of this mode (a
        newline, for the paper's first line; built once per mode)."""
        if answer not in self._finishing:
            self._finishing[answer] = finishing_tokens(self.tokenizer, len(self._stop_ids), answer).numpy()
        return self._ends, self._finishing[answer]

    def _end_of_sequence_table(self) -> torch.Tensor:
        """Per token id: does it end a sequence."""
        size = max(len(self.tokenizer), self.model.get_output_embeddings().weight.shape[0])
        stop = torch.zeros(size, dtype=torch.bool)
        eos = set(_as_list(self.model.generation_config.eos_token_id)) | {self.tokenizer.eos_token_id}
        stop[[i for i in eos if i is not None]] = True
        return stop


class _HostStop:
    """The stop rule, on the host, for both decode paths: the tokens the host has read, each row's count, which rows
    still run. A row is done at an end-of-sequence token, at its budget, or (its text decoded only after a token
    that may finish an answer: a newline, for the paper's first line) where the answer mode says. Plain numpy
    arrays, so that no torch call here can wait on the device (a test counts the ones that do)."""

    def __init__(self, backend: HFBackend, rows: int, steps: int, budgets: list[int], answer: AnswerMode):
        self.backend, self.answer = backend, answer
        self.tokens = np.zeros((rows, steps), dtype=np.int64)
        self.counts = np.zeros(rows, dtype=np.int64)
        self.budget = np.asarray(budgets, dtype=np.int64)
        self.running = np.ones(rows, dtype=bool)
        self.ends, self.finishing = backend._stop_tables(answer)

    def step(self, chosen: np.ndarray) -> np.ndarray:
        """The tokens the running rows (in row order) chose at one step: recorded; which of them are done."""
        live = np.flatnonzero(self.running)
        self.tokens[live, self.counts[live]] = chosen
        self.counts[live] += 1
        done = self.ends[chosen] | (self.counts[live] >= self.budget[live])
        for slot in np.flatnonzero(self.finishing[chosen] & ~done):
            row = live[slot]
            text = self.backend.tokenizer.decode(
                self.tokens[row, : self.counts[row]].tolist(), skip_special_tokens=True
            )
            done[slot] = self.answer.done(text)
        self.running[live[done]] = False
        return done

    def read(self, window: np.ndarray) -> bool:
        """The chosen tokens of the steps in ``window`` (every row x steps), step by step; True when every row has
        stopped (the tokens of a stopped row's later steps are ignored)."""
        for column in range(window.shape[1]):
            if not self.running.any():
                break
            self.step(window[self.running, column])
        return not self.running.any()

    def generated(self) -> list[list[int]]:
        return [self.tokens[row, : self.counts[row]].tolist() for row in range(len(self.counts))]


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
