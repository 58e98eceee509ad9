"""The fine-tuning loss with the shared few-shot prefix computed once per batch.

Every training example is ``<chat header + the paper's few-shot prompt> <expression> = <answer>``: about 200 of an
addition example's ~220 tokens are the same in every row. trl's SFTTrainer runs each row whole and computes the
output head's logits at every position (49,152 words x 220 positions a row for SmolLM2), though the loss reads
only the answer's ~10. Here the batch's common token prefix runs once, with gradients, its keys and values are
repeated for the rows (``DynamicCache.batch_repeat_interleave``, differentiable), each row then runs only its own
tokens, and the logits are computed only where a label is read. The loss and its gradient are the same as trl's
completion-only loss (the sum of the answer tokens' cross-entropy over their count; tested against it); a batch
of 16 addition examples costs about a fifth of the compute.

Rows must share their prefix: finetune.data orders the examples in blocks of one prompt template, and the
trainer reads them in that order. A batch whose rows share no prefix is still right, only not faster.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from trl import SFTTrainer


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> int:
    """How many leading positions every row holds the same real token at, ending before the position whose logit
    predicts the batch's first label (that logit must come from the rows' own pass)."""
    same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)
    run = int(same.long().cumprod(0).sum())
    labelled = (labels != -100).any(0).nonzero()
    if not len(labelled):
        return 0
    return max(0, min(run, int(labelled[0]) - 1))


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DistributedDataParallel: the prefix pass goes around DDP, so that DDP sees one forward
    per backward (the rows' pass); the graph holds both and its gradients reach every parameter once."""
    return getattr(model, "module", model) if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def prefix_groups(input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> list[list[int]]:
    """The batch's rows by prompt template: a row joins the first group whose first row shares at least half of the
    shorter of their two prompts (the few-shot examples, not only the chat header), else it starts a group. A batch
    of one template is one group; a mixture's last batch, which holds two templates' leftover rows, is two."""
    real = attention_mask.bool()
    labelled = labels != -100
    # each row's prompt length: where its first label is (a row with no label: all of its real tokens)
    prompt = [int(labelled[i].nonzero()[0]) if labelled[i].any() else int(real[i].sum()) for i in range(len(real))]
    groups: list[list[int]] = []
    for i in range(input_ids.shape[0]):
        for group in groups:
            leader = group[0]
            same = (input_ids[i] == input_ids[leader]) & real[i] & real[leader]
            if int(same.long().cumprod(0).sum()) >= min(prompt[i], prompt[leader]) // 2:
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def shared_prefix_loss(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Summed cross-entropy of the labelled tokens (right-padded rows, -100 where no label), divided by
    ``num_items_in_batch`` (the labelled tokens of all the batches of an accumulation step) or by their count.
    Each template's rows run with their own shared prefix (``prefix_groups``): a batch that mixes two templates
    costs two prefix passes, not every row run whole (at batch 32 on SmolLM2 that was 22 GB instead of 3-8)."""
    groups = prefix_groups(input_ids, attention_mask, labels)
    total = sum(
        _summed_loss(
            # DDP's forward is called once per backward (the last group); the others go around it, as the prefix does
            model if number == len(groups) - 1 else _unwrapped(model),
            model,
            input_ids[rows],
            attention_mask[rows],
            labels[rows],
        )
        for number, rows in enumerate(groups)
    )
    count = (labels[:, 1:] != -100).sum() if num_items_in_batch is None else num_items_in_batch
    return total / torch.as_tensor(count, device=total.device).clamp(min=1)


def _summed_loss(
    rows_model: torch.nn.Module,
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
) -> torch.Tensor:
    """The summed cross-entropy of rows that share a prompt template: their common prefix once, then each row."""
    rows, width = input_ids.shape
    split = shared_prefix_length(input_ids, attention_mask, labels) if rows > 1 else 0
    cache = DynamicCache(config=_unwrapped(model).config)
    if split:
        _unwrapped(model)(input_ids=input_ids[:1, :split], past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(rows)
    # position t's logit predicts the token at t + 1: keep the positions some row reads a label from
    read = (labels[:, 1:] != -100).any(0).nonzero().flatten()
    positions = torch.arange(split, width, device=input_ids.device).expand(rows, -1)
    output = rows_model(
        input_ids=input_ids[:, split:],
        attention_mask=attention_mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=read - split,
    )
    targets = labels[:, read + 1]
    return F.cross_entropy(output.logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum")


class SharedPrefixTrainer(SFTTrainer):
    """trl's SFTTrainer (data, chat template, completion masks, optimizer, schedule, checkpoints, resume, logging)
    with the loss above."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = shared_prefix_loss(
            model, inputs["input_ids"], inputs["attention_mask"], inputs["labels"], num_items_in_batch
        )
        return (loss, None) if return_outputs else loss
