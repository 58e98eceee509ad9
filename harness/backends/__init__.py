"""Backends turn chat prompts into generations; everything else (problems, prompts, stopping, scoring, results) lives
above them. Every backend is a ChatBackend: chat_prompt(), count_tokens(), footprint_mb, kernel, and generate(), whose
batching and sharding loop is written once here; a backend implements prepare() and generate_batch(), and stops each
generation where the run's answer mode says (harness/questions/answers.py: the paper's first line, by default).

The backends a run can name are the records of BACKENDS, one place to add one: its module (imported only when it is
loaded), its class, and what it runs; the class's ``load(request)`` makes it from a LoadRequest. The scripted backend
(no model: answers from a function, harness/backends/scripted.py) tests everything above and is passed by tests.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

from harness.core.errors import UserError
from harness.core.startup import freeze_imports
from harness.models import PrecisionSpec
from harness.models.checkpoints import Checkpoint
from harness.questions.answers import FIRST_LINE, AnswerMode


@dataclass(frozen=True)
class BackendRecord:
    """A backend a run can name: where its class is (imported only when loaded) and what it runs."""

    module: str
    cls: str
    runs: str


BACKENDS = {
    "hf": BackendRecord(
        "harness.backends.hf", "HFBackend", "transformers: casts, bitsandbytes int8/nf4, GPTQ/AWQ, adapters"
    ),
    "llamacpp": BackendRecord("harness.backends.llamacpp", "LlamaCppBackend", "llama.cpp: the GGUF variants"),
    "vllm": BackendRecord(
        "harness.backends.vllm", "VLLMBackend", "vLLM's engine (.venv-vllm): casts, GPTQ/AWQ checkpoints, adapters"
    ),
    "api": BackendRecord(
        "harness.backends.api", "APIBackend", "a model served behind an OpenAI-compatible endpoint, as declared"
    ),
}


@dataclass(frozen=True)
class LoadRequest:
    """What a backend is loaded with: ``weights`` a checkpoint directory or a GGUF file (for ``api``, the directory
    whose tokenizer templates the prompts, or None), what that directory holds as the plan read it (``checkpoint``,
    where it was read), the precision, an adapter, the batch size, and the options of the backends that take them
    (vLLM's tensor parallelism and batch invariance; the served model's endpoint and its run directory's journal)."""

    weights: str | None
    precision: PrecisionSpec
    adapter: str | None
    batch_size: int
    tensor_parallel_size: int = 1
    batch_invariant: bool = False
    endpoint: object = None
    journal: object = None
    checkpoint: Checkpoint | None = None


@dataclass(frozen=True)
class Sampling:
    """Decoding settings. ``paper`` is the paper's generation table (tab:generation_config)."""

    do_sample: bool = False
    top_k: int = 50
    top_p: float = 0.95
    temperature: float = 0.1

    @classmethod
    def named(cls, name: str) -> Sampling:
        if name == "greedy":
            return cls(do_sample=False)
        if name == "paper":
            return cls(do_sample=True, top_k=50, top_p=0.95, temperature=0.1)
        raise UserError(f"unknown decoding '{name}'; known: greedy, paper (top-k 50, top-p 0.95, temperature 0.1)")


@dataclass
class Generation:
    text: str  # everything generated up to the stop, special tokens removed
    tokens: int  # generated tokens up to and including the stop
    prompt_tokens: int = 0  # as a server reports them (the api backend); 0 where not counted
    # a served model's (the api backend): the model id that answered, the endpoint that answered, and whether the
    # reply ran past the request's budget or first line and was cut to them
    model: str = ""
    endpoint: str = ""
    cut: bool = False
    # whether the generation ended by itself (the end of the model's turn, or the answer mode's stop) rather than at
    # its budget; None where a backend does not know, then judged by ``generate``
    finished: bool | None = None


@dataclass(frozen=True)
class Shard:
    """Which batches of a cell this process generates: batch b belongs to rank b % world.

    Batch boundaries and per-batch seeds are those of a single process, so the union over ranks is the
    single-process result, sampled decoding included.
    """

    rank: int = 0
    world: int = 1

    def owns(self, batch_index: int) -> bool:
        return batch_index % self.world == self.rank


SINGLE_PROCESS = Shard()


# The transformers backend's static path (GPU) reads the tokens every this many decode steps: a read waits for the
# device, so reading every step leaves a step's host work unoverlapped (the launch queue drains); reading late makes
# the device run up to READ_EVERY - 1 steps past the batch's end. Not yet measured on a GPU (bench.run --only eval
# --device cuda times 1, 4, 8 and 16); NUMPREC_READ_EVERY overrides it.
READ_EVERY = 8


def read_every() -> int:
    """READ_EVERY, or NUMPREC_READ_EVERY's whole number of steps (at least 1); anything else is one line."""
    text = os.environ.get("NUMPREC_READ_EVERY", str(READ_EVERY)).strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:  # ASCII: "²".isdigit() is true
        raise UserError(f"NUMPREC_READ_EVERY={text!r}: give a whole number of decode steps, at least 1 (default 8)")
    return int(text)


# Which kernel multiplies bf16 layers on a CPU (harness/backends/widened_bf16.py): torch's bf16 one, or float32's GEMM
# over the bf16 values; without NUMPREC_BF16_GEMM the CPU's bf16 instructions decide.
BF16_GEMMS = ("native", "float32")


def bf16_gemm() -> str:
    """NUMPREC_BF16_GEMM's choice ('' for none); one line when it names no kernel. Read here, where torch is not
    imported, so that the plan checks it before any work."""
    choice = os.environ.get("NUMPREC_BF16_GEMM", "")
    if choice and choice not in BF16_GEMMS:
        raise UserError(f"NUMPREC_BF16_GEMM={choice!r} names no bf16 kernel; use one of {', '.join(BF16_GEMMS)}")
    return choice


def check_thinking_switch(tokenizer, thinking: str) -> None:
    """--thinking on|off needs a chat template with a thinking switch (enable_thinking, as Qwen3's has): one without
    is refused in one line (the switch would silently do nothing)."""
    if thinking != "auto" and "enable_thinking" not in (getattr(tokenizer, "chat_template", None) or ""):
        raise UserError(f"--thinking {thinking}: this model's chat template has no thinking switch; drop --thinking")


class ChatBackend:
    """What every backend shares: the model's own chat template and token counts, from its HF tokenizer, and the
    one batching and sharding loop (``generate``). A backend implements ``prepare`` (work shared by all prompts
    of a call, such as their common prefix) and ``generate_batch`` (one batch of rows)."""

    tokenizer = None
    batch_size = 16

    def generate(
        self,
        prompts: list[str],
        max_new_tokens: int | list[int],
        sampling: Sampling,
        seed: int | list[int] = 0,
        on_batch=None,
        shard: Shard = SINGLE_PROCESS,
        batch_size: int | None = None,
        answer: AnswerMode = FIRST_LINE,
    ) -> list[Generation | None]:
        """Generate for the prompts of this shard's batches (None for the others), ``batch_size`` rows a batch
        (default: the backend's), each stopped where ``answer`` says. Budgets and sampling seeds may differ per
        prompt; greedy results depend on neither batch size nor order, sampled ones on the seeds only."""
        size = batch_size or self.batch_size
        budgets, seeds = per_prompt(max_new_tokens, len(prompts)), row_seeds(seed, len(prompts))
        owned = [start for start in range(0, len(prompts), size) if shard.owns(start // size)]
        out: list[Generation | None] = [None] * len(prompts)
        if not owned:
            return out
        shared = self.prepare(prompts, budgets)
        for start in owned:
            rows = slice(start, start + size)
            out[rows] = self.generate_batch(shared, rows, budgets[rows], sampling, seeds[rows], answer)
            for generation, budget in zip(out[rows], budgets[rows], strict=True):
                if generation.finished is None:
                    generation.finished = generation.tokens < budget or answer.done(generation.text)
            if on_batch:
                on_batch(len(out[rows]))
        return out

    def prepare(self, prompts: list[str], budgets: list[int]):
        """What the batches of one generate() call share (handed to generate_batch as ``shared``)."""
        return prompts

    def generate_batch(
        self, shared, rows: slice, budgets: list[int], sampling: Sampling, seeds: list[int], answer: AnswerMode
    ):
        """Generations for prompts[rows], with their budgets and sampling seeds, each stopped where ``answer`` says."""
        raise NotImplementedError

    thinking = "auto"  # the chat template's thinking switch: auto leaves it, on / off sets enable_thinking
    # What the attention's KV cache holds, for the rows: "" where it is the model's dtype or the server's affair
    kv_cache = ""

    def set_thinking(self, thinking: str) -> None:
        """--thinking on|off: where the model's chat template has a thinking switch (enable_thinking, as Qwen3's
        has), set it; a template without one is refused in one line (the switch would silently do nothing)."""
        check_thinking_switch(self.tokenizer, thinking)
        self.thinking = thinking

    def chat_prompt(self, user_message: str) -> str:
        """The user turn wrapped in the model's own chat template, ready for the assistant to answer."""
        switch = {} if self.thinking == "auto" else {"enable_thinking": self.thinking == "on"}
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": user_message}], tokenize=False, add_generation_prompt=True, **switch
        )

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def activation_dtype(self) -> str:
        """The dtype the matrix multiplies consume: the precision's, unless the loaded kernel uses another."""
        return self.precision.activation_dtype

    @property
    def matmul_precision(self) -> str:
        """The matrix multiplies' arithmetic as it is in force when asked (after generating)."""
        return matmul_precision(self.activation_dtype, getattr(self, "device", "cpu"))


def matmul_precision(activation_dtype: str, device: str) -> str:
    """The arithmetic of matrix multiplies that consume ``activation_dtype``: other dtypes are what they say
    (bfloat16, float16, q8_1, ...); float32 ones are ``float32_matmul``'s."""
    return float32_matmul(device) if activation_dtype == "float32" else activation_dtype


def float32_matmul(device: str) -> str:
    """What torch's float32 matrix multiplies compute in on ``device`` ("cpu", "cuda") as its flags stand:
    "ieee fp32" ("ieee fp32 (tf32 off)" on a GPU), "tf32" (a 10-bit mantissa, allowed on GPUs by some setups),
    or a reduced mode torch was told to allow on a CPU."""
    import torch

    mode = torch.get_float32_matmul_precision()  # highest, high or medium
    if device == "cuda":
        return "tf32" if torch.backends.cuda.matmul.allow_tf32 or mode != "highest" else "ieee fp32 (tf32 off)"
    return "ieee fp32" if mode == "highest" else f"fp32 with matmul precision {mode} (reduced passes allowed)"


def per_prompt(value: int | list[int], count: int) -> list[int]:
    """A per-prompt setting (token budget, sampling seed) given once for all prompts or one per prompt."""
    return [value] * count if isinstance(value, int) else list(value)


def row_seeds(seed: int | list[int], count: int) -> list[int]:
    """Sampling seeds, one per prompt (from one seed: seed and position), so that sampled answers depend on
    neither batch composition nor shard."""
    if isinstance(seed, int):
        return [(seed * 1_000_003 + index) % 2**63 for index in range(count)]
    return list(seed)


def feedable_prefix(ids: list[list[int]]) -> list[int]:
    """The longest token prefix all prompts share, less what would leave a prompt with nothing of its own to
    feed: every row must feed at least one token beyond the shared prefix."""
    prefix = os.path.commonprefix(ids)
    return prefix[: min(len(prefix), min(len(x) for x in ids) - 1)]


def backend_for(requested: str | None, precision: PrecisionSpec) -> str:
    """The backend a variant runs on: the one asked for, else the one its precision needs, else hf."""
    if requested is not None and requested not in BACKENDS:
        raise UserError(f"unknown backend '{requested}'; known: {', '.join(BACKENDS)}")
    needed = precision.backend
    if requested == "api":  # the server runs it, at whatever precision it was served: the label is declared
        return "api"
    if requested and needed and requested != needed:
        raise UserError(f"precision {precision.name} runs on the {needed} backend, not {requested}; drop --backend")
    if requested == "llamacpp" and needed != "llamacpp":
        raise UserError(f"the llamacpp backend runs the gguf-* precisions, not {precision.name}")
    return requested or needed or "hf"


def load_backend(
    name: str,
    weights: str | None,
    precision: PrecisionSpec,
    adapter: str | None,
    batch_size: int,
    tensor_parallel_size: int = 1,
    batch_invariant: bool = False,
    endpoint=None,
    journal=None,
    checkpoint: Checkpoint | None = None,
):
    """The one factory of backends: ``name``'s record in BACKENDS, its class loaded for ``precision``."""
    record = BACKENDS.get(name)
    if record is None:
        raise UserError(f"unknown backend '{name}'; known: {', '.join(BACKENDS)}")
    backend = getattr(importlib.import_module(record.module), record.cls)
    freeze_imports()  # before the first model: the imports' objects leave the collector's walks
    options = {"tensor_parallel_size": tensor_parallel_size, "batch_invariant": batch_invariant}
    served = {"endpoint": endpoint, "journal": journal}
    request = LoadRequest(weights, precision, adapter, batch_size, **options, **served, checkpoint=checkpoint)
    return backend.load(request)
