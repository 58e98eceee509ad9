"""Several runs of one shape trained as one batched model: a pack.

Each parameter of the paper's GPT (scratch/model.py) is held stacked along a leading run dimension R, and the forward
pass is written for the stack: embeddings looked up per run (one table of R x vocab rows), layer norms with per-run
weights, linear layers as batched matrix products over the runs (``baddbmm``), attention with the runs folded into
the batch (``scaled_dot_product_attention`` on [R x batch, heads, T, D]). Forward and backward are plain tensor
programs, with no vmap: inductor compiles them on the CPU and on CUDA, and CUDA graphs capture them.

Each run keeps its own initialisation (its seed's GPT, drawn on the CPU), data, loss and AdamW state (elementwise),
so a packed run follows the trajectory of the run made alone up to the rounding of batched matrix products; a pack
of one is the run alone.

Nothing a compiler or a kernel does ends a run: a failure of the compiled step (compiling, a graph's first replay or
any later step, forward or backward) moves the pack to eager mode at that step, and a fused attention kernel that
refuses moves it to the math kernel; each is said in one line naming the cause, and the summary records what ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from harness.core import vec_isa
from harness.core.errors import one_line
from scratch.model import GPT, GPTConfig, apply_rotary
from scratch.numerics import autocast, training_dtype

# --attention: which attention kernels the step may use, in the order they are tried. auto: flash, then the
# memory-efficient kernel, then math; cuDNN's only when asked (its failure stopped the first GPU run of this step).
ATTENTION = {
    "auto": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
    "flash": [SDPBackend.FLASH_ATTENTION],
    "efficient": [SDPBackend.EFFICIENT_ATTENTION],
    "cudnn": [SDPBackend.CUDNN_ATTENTION],
    "math": [SDPBackend.MATH],
}


def build_model(config, device: torch.device | str = "cpu") -> GPT:
    """A run's GPT at its precision, its weights drawn on the CPU from its seed (the same start on every device)."""
    task = config.task()
    torch.manual_seed(config.seed)
    model = GPT(GPTConfig(task.vocab_size, task.seq_len, config.depth, config.n_head, config.n_embd))
    return model.to(device=device, dtype=training_dtype(config.precision))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Each run's x [R, N, in] through its own weight [R, out, in] and bias [R, out]."""
    if bias is None:
        return torch.bmm(x, weight.transpose(1, 2))
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """nn.LayerNorm (eps 1e-5) with each run's own scale and shift."""
    return F.layer_norm(x, x.shape[-1:]) * weight.unsqueeze(1) + bias.unsqueeze(1)


def attention(qkv: torch.Tensor, batch: int, heads: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Causal self-attention of every run's batch at once: [R, B x T, 3C] -> [R, B x T, C], the runs folded into the
    batch of one scaled_dot_product_attention."""
    runs, tokens, width = qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3
    length = tokens // batch
    q, k, v = (t.reshape(runs * batch, length, heads, width // heads).transpose(1, 2) for t in qkv.split(width, -1))
    q, k = apply_rotary(q, cos[:length], sin[:length]), apply_rotary(k, cos[:length], sin[:length])
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(runs, tokens, width)


def stacked_logits(params: dict[str, torch.Tensor], tokens: torch.Tensor, cos, sin, layers: int, heads: int):
    """The logits [R, B, T, vocab] of R stacked GPTs (``params``: GPT's parameter names, each [R, ...]) for their
    tokens [R, B, T]: GPT.forward, batched over runs."""
    runs, batch, length = tokens.shape
    table = params["wte.weight"]
    vocab, width = table.shape[1], table.shape[2]
    offsets = torch.arange(runs, device=tokens.device).view(runs, 1, 1) * vocab  # run r's rows of the one table
    x = F.embedding(tokens + offsets, table.reshape(runs * vocab, width)).view(runs, batch * length, width)
    cos, sin = cos.to(table.dtype), sin.to(table.dtype)
    for layer in range(layers):

        def p(name: str, layer: int = layer) -> torch.Tensor:
            return params[f"blocks.{layer}.{name}"]

        h = layer_norm(x, p("ln_1.weight"), p("ln_1.bias"))
        y = attention(linear(h, p("attn.qkv.weight"), p("attn.qkv.bias")), batch, heads, cos, sin)
        x = x + linear(y, p("attn.proj.weight"), p("attn.proj.bias"))
        h = layer_norm(x, p("ln_2.weight"), p("ln_2.bias"))
        h = F.gelu(linear(h, p("mlp.fc.weight"), p("mlp.fc.bias")), approximate="tanh")  # NewGELU
        x = x + linear(h, p("mlp.proj.weight"), p("mlp.proj.bias"))
    x = layer_norm(x, params["ln_f.weight"], params["ln_f.bias"])
    return linear(x, params["lm_head.weight"]).view(runs, batch, length, vocab)


def run_losses(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each run's mean cross-entropy of its answer tokens (R,): ``logits`` [R, B, T-1, V] for tokens[:, :, :-1]."""
    targets = tokens[:, :, 1:].masked_fill(~mask[:, :, 1:], -100)
    each = F.cross_entropy(logits.float().flatten(0, 2), targets.flatten(), ignore_index=-100, reduction="none")
    return each.view(tokens.shape[0], -1).sum(1) / (targets != -100).flatten(1).sum(1)


class Pack:
    """R runs of one pack_key (scratch/train.py) as one batched model, with one AdamW over the stacked weights.
    ``say`` takes the pack's one-line notices (a fallback and its cause)."""

    def __init__(self, configs: Sequence, device: torch.device, say: Callable[[str], object] = print):
        self.configs, self.device, self.say = list(configs), device, say
        config = configs[0]
        self.models = [build_model(c, device) for c in configs]  # each run's GPT: its start, and its evaluation
        self.params = {
            name: torch.stack([dict(m.named_parameters())[name].detach() for m in self.models]).requires_grad_()
            for name, _ in self.models[0].named_parameters()
        }
        self.cos, self.sin = self.models[0].rope_cos, self.models[0].rope_sin
        decay = [p for p in self.params.values() if p.dim() - 1 >= 2]  # the leading dimension is the run's
        no_decay = [p for p in self.params.values() if p.dim() - 1 < 2]
        groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        # Pure bf16: AdamW keeps its state in the parameters' dtype, so moments are bf16 too (the paper's setting).
        # Fused (one kernel for all tensors) on CUDA; the CPU keeps the default for unchanged results.
        self.optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.999), fused=device.type == "cuda")
        self.attention, self.attention_error = config.attention, None
        self.losses, self.compiled, self.compile_error, self.steps_taken = self._losses, False, None, 0
        if config.compile == "on" or (config.compile == "auto" and device.type == "cuda"):
            self.compiled = True
            torch._dynamo.reset()  # a process trains pack after pack: start each with no stale graphs
            if device.type == "cuda":
                # CUDA graphs for the fixed-shape forward and backward: one launch instead of hundreds per step. The
                # stacked weights keep their addresses (AdamW updates them in place), so graphs need not copy them.
                for parameter in self.params.values():
                    torch._dynamo.mark_static_address(parameter)
            mode = "reduce-overhead" if device.type == "cuda" else "default"
            vec_isa.remember()  # inductor's check of the CPU's vector instructions, once a machine
            self.losses = torch.compile(self._losses, mode=mode, dynamic=False)

    def _losses(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Each run's loss (R,) on its batch: tokens and mask (R, B, T)."""
        config = self.configs[0]
        with autocast(config.precision, self.device.type), sdpa_kernel(ATTENTION[self.attention], set_priority=True):
            logits = stacked_logits(self.params, tokens[:, :, :-1], self.cos, self.sin, config.depth, config.n_head)
        return run_losses(logits, tokens, mask)

    def step(self, tokens: torch.Tensor, mask: torch.Tensor, lr: float) -> torch.Tensor:
        """One AdamW step for every run; returns the losses, on the device (no host synchronisation)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        while True:
            self.optimizer.zero_grad(set_to_none=True)
            try:
                if self.compiled and self.device.type == "cuda":
                    torch.compiler.cudagraph_mark_step_begin()
                losses = self.losses(tokens, mask)
                losses.sum().backward()  # run r's parameters only see run r's loss
                break
            except Exception as err:  # noqa: BLE001 (what eager mode or the math kernel can make must not end a run)
                if not self._fall_back(err):
                    raise
        self.optimizer.step()
        self.steps_taken += 1
        return losses.detach().clone()  # a copy: a CUDA graph's outputs are overwritten by its next replay

    def _fall_back(self, err: Exception) -> bool:
        """After a failed step: the compiled step gives way to eager mode, then a fused attention kernel to the math
        kernel; False when nothing is left to fall back to."""
        at = f"step {self.steps_taken + 1}"
        if self.compiled:
            self.compile_error = f"{at}: {one_line(err)}"
            self.losses, self.compiled = self._losses, False
            self.say(f"torch.compile failed at {at} ({one_line(err)}); training eagerly from there")
            return True
        if self.attention != "math":
            self.attention_error = f"{self.attention} at {at}: {one_line(err)}"
            self.say(f"the {self.attention} attention kernel failed at {at} ({one_line(err)}); using the math kernel")
            self.attention = "math"
            return True
        return False

    @torch.no_grad()
    def model(self, run: int) -> GPT:
        """Run ``run``'s model with its current weights."""
        for name, parameter in self.models[run].named_parameters():
            parameter.copy_(self.params[name][run])
        return self.models[run]

    def optimizer_state(self, run: int) -> dict:
        """Run ``run``'s AdamW state in the form a pack of one saves (checkpoints are per run)."""
        state = self.optimizer.state_dict()
        per_run = {
            index: {key: value if key == "step" else value[run].clone() for key, value in entry.items()}
            for index, entry in state["state"].items()
        }
        return {"state": per_run, "param_groups": state["param_groups"]}

    def load(self, run: int, model_state: dict) -> None:
        """Put a run's checkpointed weights into the pack."""
        with torch.no_grad():
            for name, value in model_state.items():
                if name in self.params:  # the RoPE tables are buffers, the same for every run
                    self.params[name][run].copy_(value)

    def load_optimizer(self, states: list[dict]) -> None:
        merged = {
            index: {
                key: entry if key == "step" else torch.stack([s["state"][index][key] for s in states])
                for key, entry in states[0]["state"][index].items()
            }
            for index in states[0]["state"]
        }
        self.optimizer.load_state_dict({"state": merged, "param_groups": states[0]["param_groups"]})

    def attention_kernel(self) -> str:
        """The kernel the step's attention runs on: the first of its setting's kernels, in their order, that takes
        the step's queries (their shape a row's, their dtype the step's), as scaled_dot_product_attention picks."""
        config = self.configs[0]
        dtype = torch.bfloat16 if config.precision.startswith("bf16") else torch.float32
        length, head = config.task().seq_len - 1, config.n_embd // config.n_head
        q = torch.randn(1, config.n_head, length, head, device=self.device, dtype=dtype)
        for backend in ATTENTION[self.attention]:
            try:
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(q, q, q, is_causal=True)
            except RuntimeError:
                continue
            return backend.name.lower().removesuffix("_attention")
        return "none"

    def described(self) -> dict:
        """What ran, for the summary: compiled or eager (and why), which attention kernels, and the one that ran."""
        return {
            "compiled": self.compiled,
            "compile_error": self.compile_error,
            "attention": self.attention,
            "attention_kernel": self.attention_kernel(),
            "attention_error": self.attention_error,
        }
