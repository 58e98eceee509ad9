"""The vLLM backend (CUDA GPUs only): the same chat-templated prompts, decoding settings and stop rule as
the transformers backend, over vLLM's offline ``LLM.generate`` API with automatic prefix caching, so the
shared few-shot prefix is computed once per cell as in ``hf``.

Not run on the CPU machines this project is developed on (no CUDA there): written against vLLM's documented
``LLM`` / ``SamplingParams`` / ``LoRARequest`` API. Without CUDA, harness.eval stops before loading.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.answers import AnswerMode, stop_length
from harness.backends import ChatBackend, Generation, Sampling
from harness.errors import UserError
from harness.models import PrecisionSpec


class VLLMBackend(ChatBackend):
    name = "vllm"

    def __init__(
        self,
        weights: str,
        precision: PrecisionSpec,
        adapter: str | None = None,
        tensor_parallel_size: int = 1,
        batch_size: int = 16,
        batch_invariant: bool = False,
    ):
        self.batch_invariant = batch_invariant
        if batch_invariant:  # read by vLLM when it loads: kernels whose results do not depend on the batch
            os.environ["VLLM_BATCH_INVARIANT"] = "1"
        try:
            from vllm import LLM
        except ImportError:
            raise UserError("--backend vllm needs vLLM on a CUDA machine; run: pip install vllm") from None
        kwargs = {
            "model": weights,
            "tensor_parallel_size": tensor_parallel_size,
            "enable_prefix_caching": True,
            "dtype": precision.activation_dtype,
            "seed": 0,
        }
        if precision.method == "bnb" and precision.weight_dtype == "nf4":
            kwargs["quantization"] = "bitsandbytes"
        elif precision.method not in ("cast", "gptq", "awq"):  # GPTQ/AWQ are read from the checkpoint's config
            raise UserError(f"precision {precision.name} is not available on the vllm backend; use --backend hf")
        if adapter:
            kwargs.update(enable_lora=True, max_lora_rank=64)
        self.precision = precision
        self.batch_size = batch_size
        self.weights = weights
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.lora = None
        if adapter:
            from vllm.lora.request import LoRARequest

            self.lora = LoRARequest("adapter", 1, adapter)

    @property
    def footprint_mb(self) -> float:
        """Size of the weights as stored (vLLM does not report its resident weight size through the API)."""
        return sum(f.stat().st_size for f in Path(self.weights).glob("*.safetensors")) / 2**20

    @property
    def kernel(self) -> str:
        """vLLM's quantization kernel as its engine resolved it (e.g. awq_marlin), else its dense path."""
        config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        invariant = "; batch-invariant kernels (VLLM_BATCH_INVARIANT=1)" if self.batch_invariant else ""
        return f"vllm {getattr(config, 'quantization', None) or 'dense'}{invariant}"

    @property
    def matmul_precision(self) -> str:
        """vLLM computes in its own worker processes, whose TF32 setting this process cannot read."""
        dtype = self.activation_dtype
        return dtype if dtype != "float32" else "float32 (in vLLM's workers; their TF32 setting not read)"

    def generate_batch(
        self, shared, rows: slice, budgets: list[int], sampling: Sampling, seeds: list[int], answer: AnswerMode
    ):
        """One batch of --batch-size prompts in one LLM.generate call (vLLM schedules them itself)."""
        from vllm import SamplingParams

        # A seed per problem: sampled answers depend on neither vLLM's scheduling nor the shard.
        params = [
            SamplingParams(
                max_tokens=budget,
                temperature=sampling.temperature if sampling.do_sample else 0.0,
                top_k=sampling.top_k if sampling.do_sample else -1,
                top_p=sampling.top_p if sampling.do_sample else 1.0,
                seed=seed,
                skip_special_tokens=True,
            )
            for budget, seed in zip(budgets, seeds, strict=True)
        ]
        outputs = self.llm.generate(
            [
                {"prompt_token_ids": self.tokenizer(prompt, add_special_tokens=False)["input_ids"]}
                for prompt in shared[rows]
            ],
            params,
            lora_request=self.lora,
            use_tqdm=False,
        )
        result = []
        for output in outputs:
            ids = list(output.outputs[0].token_ids)
            used = stop_length(self.tokenizer, ids, answer)
            finished = used < len(ids) or output.outputs[0].finish_reason == "stop"
            text = self.tokenizer.decode(ids[:used], skip_special_tokens=True)
            result.append(Generation(text=text, tokens=used, finished=finished))
        return result
