"""The llama.cpp backend for GGUF precisions, over llama-cpp-python's bindings of the C API (llama.h).

llama-cpp-python's high-level completion call takes one prompt at a time, so this drives llama.cpp's batch
API directly, the way the transformers backend drives generate(): the few-shot prefix every prompt of a
cell shares is decoded once into sequence 0 of a unified KV cache; each row of a batch is a sequence that
starts as a copy of it (``llama_memory_seq_cp`` shares the cells, it does not recompute them), then all
rows' suffixes go through in one ``llama_decode``, then one token per running row per step.

At batch size 1 each prompt is decoded whole from an empty cache instead, as llama.cpp's server decodes a
request: ggml's kernels round a prompt decoded in two pieces (prefix, then suffix) differently from one decoded
in one piece (logits apart by up to ~1 on the embedded model), so only this way does a run here answer exactly
what a llama.cpp server answers for the same GGUF (tests/harness/backends/test_api.py). Flash attention is on, as
llama.cpp's server (``-fa auto``) and harness.serve run it on a CPU.

Tokens and text go through the same Hugging Face tokenizer and chat template as the transformers path
(converted from this GGUF, so the ids are llama.cpp's own); the stop is the run's answer mode's
(harness/questions/answers.py). Sampling is per problem (seeded by problem index), so it does not depend on batching.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from harness.backends import ChatBackend, Generation, LoadRequest, Sampling, feedable_prefix
from harness.backends.sampling import gumbel_choice, warped_candidates
from harness.core.errors import UserError
from harness.core.quiet import silence_llama_cpp
from harness.models import PrecisionSpec
from harness.models.gguf import import_llama_cpp
from harness.questions.answers import FIRST_LINE, AnswerMode, finishing_tokens

MAX_ROWS = 128  # sequences per batch (llama.cpp allows 256 in all, and sequence 0 holds the prefix)


def default_threads() -> int:
    return int(os.environ.get("NUMPREC_THREADS") or os.environ.get("OMP_NUM_THREADS") or len(os.sched_getaffinity(0)))


class LlamaCppBackend(ChatBackend):
    @classmethod
    def load(cls, request: LoadRequest) -> LlamaCppBackend:
        if request.adapter:
            raise UserError("--adapter is not supported with GGUF precisions; evaluate adapters with --backend hf")
        return cls(request.weights, request.precision, batch_size=request.batch_size)

    name = "llamacpp"

    def __init__(self, gguf_path: str, precision: PrecisionSpec, batch_size: int = 16, threads: int | None = None):
        from transformers import AutoTokenizer

        self.lib = lib = import_llama_cpp()
        silence_llama_cpp(lib)
        lib.llama_backend_init()
        self.precision = precision
        self.batch_size = min(batch_size, MAX_ROWS)
        self.threads = threads or default_threads()
        path = Path(gguf_path)
        params = lib.llama_model_default_params()
        # ggml's extra CPU buffer types (AMX tiles, repacked weights) segfault in llama_decode on these VMs, whose
        # CPUs report AMX; the plain CPU buffers run the same quantized kernels.
        params.use_extra_bufts = False
        self.model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise UserError(f"llama.cpp could not load {path}; is it a GGUF file?")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        if (path.parent / "tokenizer_config.json").is_file():
            self.tokenizer = AutoTokenizer.from_pretrained(path.parent)
        else:  # a user's own .gguf: transformers reads the tokenizer from the file itself
            self.tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        self.ctx = None
        self.n_ctx = 0
        self._finishing: dict[AnswerMode, list[bool]] = {}

    def close(self) -> None:
        """Free llama.cpp's context and model (the next variant's model may need the memory)."""
        lib = getattr(self, "lib", None)
        if lib is None or lib.llama_free is None:  # interpreter shutdown
            return
        if getattr(self, "ctx", None):
            lib.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            lib.llama_model_free(self.model)
            self.model = None

    __del__ = close

    @property
    def footprint_mb(self) -> float:
        return self.lib.llama_model_size(self.model) / 2**20

    @property
    def kernel(self) -> str:
        return "llama.cpp ggml-" + ("gpu" if self.lib.llama_supports_gpu_offload() else "cpu")

    def _context(self, cells: int, sequences: int):
        """A context whose unified KV cache holds ``cells`` tokens; made again only when too small."""
        lib = self.lib
        if self.ctx and self.n_ctx >= cells:
            return self.ctx
        if self.ctx:
            lib.llama_free(self.ctx)
        params = lib.llama_context_default_params()
        params.n_ctx = self.n_ctx = max(cells, 2048)
        params.n_batch = params.n_ctx
        params.n_seq_max = sequences
        params.n_threads = params.n_threads_batch = self.threads
        params.kv_unified = True  # rows share the prefix cells instead of holding copies
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED  # what "auto" picks on a CPU, and a server's
        params.no_perf = True
        self.ctx = lib.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context of {params.n_ctx} tokens")
        return self.ctx

    def prepare(self, prompts: list[str], budgets: list[int]):
        """Token ids, a context large enough for a batch, and the shared prefix decoded once into sequence 0,
        which every row's sequence starts as a copy of."""
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        prefix = feedable_prefix(ids) if self.batch_size > 1 else []  # one at a time: whole, as a server decodes
        longest = max(len(x) for x in ids) - len(prefix)
        self._context(len(prefix) + self.batch_size * (longest + max(budgets)) + 8, self.batch_size + 1)
        memory = self.lib.llama_get_memory(self.ctx)
        self.lib.llama_memory_clear(memory, True)
        if prefix:
            self._decode([(0, position, token) for position, token in enumerate(prefix)], {len(prefix) - 1})
        return ids, prefix, memory

    def generate_batch(
        self,
        shared,
        rows: slice,
        budgets: list[int],
        sampling: Sampling,
        seeds: list[int],
        answer: AnswerMode = FIRST_LINE,
    ):
        ids, prefix, memory = shared
        if answer not in self._finishing:
            self._finishing[answer] = finishing_tokens(self.tokenizer, self.n_vocab, answer).tolist()
        batch = [_Row(r + 1, tokens[len(prefix) :], budgets[r], seeds[r]) for r, tokens in enumerate(ids[rows])]
        return self._generate_batch(memory, len(prefix), batch, sampling, answer)

    def _generate_batch(self, memory, prefix_len: int, rows, sampling: Sampling, answer: AnswerMode):
        lib = self.lib
        if prefix_len == 0:  # each prompt from an empty cache, its cells where a fresh server's would be
            lib.llama_memory_clear(memory, True)
        for row in rows:
            lib.llama_memory_seq_cp(memory, 0, row.seq, -1, -1)
        entries, wanted = [], set()
        for row in rows:
            for i, token in enumerate(row.tokens):
                entries.append((row.seq, prefix_len + i, token))
            wanted.add(len(entries) - 1)
            row.position = prefix_len + len(row.tokens)
        logits = self._decode(entries, wanted)
        last = {entries[index][0]: logits[index] for index in wanted}
        running = list(rows)
        for _ in range(max(row.budget for row in rows)):
            step = []
            for row in running:
                token = _choose(last[row.seq], sampling, row.seed, len(row.generated))
                row.generated.append(token)
                # The row's text is decoded only when the token can have finished its answer.
                row.done = bool(lib.llama_vocab_is_eog(self.vocab, token)) or (
                    self._finishing[answer][token]
                    and answer.done(self.tokenizer.decode(row.generated, skip_special_tokens=True))
                )
                if not row.done and len(row.generated) < row.budget:
                    step.append(row)
            running = step
            if not running:
                break
            entries = [(row.seq, row.position + len(row.generated) - 1, row.generated[-1]) for row in running]
            logits = self._decode(entries, set(range(len(entries))))
            last = {row.seq: logits[i] for i, row in enumerate(running)}
        for row in rows:
            lib.llama_memory_seq_rm(memory, row.seq, -1, -1)
        return [
            Generation(
                text=self.tokenizer.decode(row.generated, skip_special_tokens=True),
                tokens=len(row.generated),
                finished=row.done,
            )
            for row in rows
        ]

    def _decode(self, entries: list[tuple[int, int, int]], wanted: set[int]) -> dict[int, np.ndarray]:
        """One llama_decode of (sequence, position, token) entries; logits of the ``wanted`` entries."""
        lib = self.lib
        batch = lib.llama_batch_init(len(entries), 0, 1)
        try:
            for i, (seq, position, token) in enumerate(entries):
                batch.token[i] = token
                batch.pos[i] = position
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = i in wanted
            batch.n_tokens = len(entries)
            status = lib.llama_decode(self.ctx, batch)
            if status != 0:
                raise RuntimeError(f"llama_decode failed with status {status} (KV cache of {self.n_ctx} too small?)")
            return {
                i: np.ctypeslib.as_array(lib.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy()
                for i in sorted(wanted)
            }
        finally:
            lib.llama_batch_free(batch)


class _Row:
    def __init__(self, seq: int, tokens: list[int], budget: int, seed: int):
        self.seq = seq
        self.tokens = tokens
        self.budget = budget
        self.seed = seed
        self.position = 0
        self.generated: list[int] = []
        self.done = False


def _choose(logits: np.ndarray, sampling: Sampling, seed: int, step: int) -> int:
    """Greedy argmax, or the paper's sampling as the transformers backend draws it (harness/backends/sampling.py):
    the same warping and the same seeded Gumbel noise, so both engines draw alike from alike logits."""
    if not sampling.do_sample:
        return int(np.argmax(logits))
    values, candidates = warped_candidates(
        torch.from_numpy(logits)[None].float(), sampling.temperature, sampling.top_k, sampling.top_p
    )
    return int(gumbel_choice(values, candidates, torch.tensor([seed], dtype=torch.long), step))
