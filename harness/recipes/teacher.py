"""The signal a group is scored by: the answer itself. Each problem's prompt (the evaluation's: its few-shot
template in the model's chat template) is followed by the answer the model is trained to give (``EXPR = RESULT``,
then the end of its turn), and one forward pass reads, at every position of that continuation, the model's
log-probability of the next gold token (teacher forcing). Per problem:

- ``logprob``: the sum of the log-probabilities of the result's tokens and the end of turn (the echoed expression
  before it is left out: it tells nothing of the arithmetic);
- ``exact``: whether the most likely token is the gold one at every position of the continuation, which is what
  greedy decoding would write: the exact match of the answer, read without generating.

Calibration-text loss is dominated by high-entropy tokens; this one sits on the answer's digits. The shared few-shot
prefix is computed once a call (harness/backends/shared_prefix.py), the rows after it in one batch, and the output
head is applied only at the continuation's positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from harness.backends import feedable_prefix
from harness.questions.problems import Problem
from harness.questions.prompts import user_message


@dataclass(frozen=True)
class TeacherBatch:
    """Token ids of a set of problems with their gold continuations: the shared prefix, each row's own tokens
    after it (prompt suffix, then the continuation), where each row's continuation starts, and where its result
    starts (both as indices into the row)."""

    prefix: list[int]
    rows: list[list[int]]
    continuation_at: list[int]
    result_at: list[int]
    cells: list[tuple[str, int]]  # each row's (task label, length)


def teacher_batch(tokenizer, chat_prompt, problems: list[tuple[str, Problem]], style: str = "few-shot") -> TeacherBatch:
    """The batch of ``problems`` (each with its task label), prompted as ``chat_prompt`` wraps a user message."""
    end = tokenizer.eos_token_id
    prompts, full, starts, results = [], [], [], []
    for _, problem in problems:
        prompt = tokenizer(chat_prompt(user_message(problem, style)), add_special_tokens=False)["input_ids"]
        prompts.append(prompt)
        echo = tokenizer(f"{problem.expression} =", add_special_tokens=False)["input_ids"]
        whole = tokenizer(f"{problem.expression} = {problem.answer}", add_special_tokens=False)["input_ids"]
        # the result's tokens: after the echo where the tokenizer splits there, else the whole continuation
        result = len(echo) if whole[: len(echo)] == echo else 0
        full.append(prompt + whole + [end])
        starts.append(len(prompt))
        results.append(len(prompt) + result)
    # the prefix every prompt shares, each row keeping at least one prompt token of its own (as the backend feeds)
    shared = len(feedable_prefix(prompts))
    return TeacherBatch(
        prefix=full[0][:shared],
        rows=[row[shared:] for row in full],
        continuation_at=[start - shared for start in starts],
        result_at=[start - shared for start in results],
        cells=[(label, problem.length) for label, problem in problems],
    )


@dataclass(frozen=True)
class Scores:
    """Per row: the log-probability of its result and end of turn, and whether greedy decoding writes the gold
    continuation exactly."""

    logprob: torch.Tensor  # float64 [rows]
    exact: torch.Tensor  # bool [rows]


def score(model: torch.nn.Module, batch: TeacherBatch, pad_id: int, rows_at_once: int = 64) -> Scores:
    """One forward pass over ``batch`` (the prefix once, then ``rows_at_once`` rows at a time)."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        prefix_kv = None
        if batch.prefix:
            cache = DynamicCache(config=model.config)
            # the decoder alone: the prefix's keys and values, no head over its positions
            model.model(torch.tensor([batch.prefix], device=device), past_key_values=cache, use_cache=True)
            prefix_kv = [(layer.keys, layer.values) for layer in cache.layers]
        parts = [
            _score_rows(model, batch, range(start, min(start + rows_at_once, len(batch.rows))), prefix_kv, pad_id)
            for start in range(0, len(batch.rows), rows_at_once)
        ]
    return Scores(torch.cat([part.logprob for part in parts]), torch.cat([part.exact for part in parts]))


def _score_rows(model, batch: TeacherBatch, rows: range, prefix_kv, pad_id: int) -> Scores:
    """Right-padded rows after the prefix, their positions continuing it; the head only where a gold token is
    predicted."""
    tokens = [batch.rows[row] for row in rows]
    width = max(len(row) for row in tokens)
    ids = torch.full((len(tokens), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(tokens), width), dtype=torch.long)
    for index, row in enumerate(tokens):
        ids[index, : len(row)] = torch.tensor(row)
        attention[index, : len(row)] = 1
    positions = len(batch.prefix) + torch.arange(width).expand(len(tokens), width)
    device = next(model.parameters()).device
    hidden = model.model(
        input_ids=ids.to(device),
        attention_mask=attention.to(device),
        position_ids=positions.to(device),
        past_key_values=DynamicCache(config=model.config),
        use_cache=True,
        shared_prefix=prefix_kv,
    ).last_hidden_state
    # position p predicts token p + 1: the continuation's tokens are predicted from one position before each
    where = [(index, position) for index, row in enumerate(rows) for position in _predicting(batch, row)]
    row_of = torch.tensor([index for index, _ in where])
    at = torch.tensor([position for _, position in where])
    logits = model.lm_head(hidden[row_of.to(device), at.to(device)]).float().cpu()
    gold = torch.tensor([tokens[index][position + 1] for index, position in where])
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, gold[:, None])[:, 0].double()
    in_result = at + 1 >= torch.tensor([batch.result_at[row] for row in rows])[row_of]
    logprob = torch.zeros(len(tokens), dtype=torch.float64).index_add_(0, row_of, torch.where(in_result, logprobs, 0))
    misses = torch.zeros(len(tokens), dtype=torch.long).index_add_(0, row_of, (logits.argmax(-1) != gold).long())
    return Scores(logprob, misses == 0)


def _predicting(batch: TeacherBatch, row: int) -> range:
    """The positions of ``row`` whose next token is a token of its continuation."""
    return range(batch.continuation_at[row] - 1, len(batch.rows[row]) - 1)
