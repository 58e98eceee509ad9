"""One group of cells generated and each cell scored: problems and prompts made, generated in batches (with the
invariance check's second pass where asked), each output read and judged, and the cell's row and samples made."""

from __future__ import annotations

import time
import zlib
from dataclasses import replace

from harness.backends import Sampling, row_seeds
from harness.questions.problems import generate
from harness.questions.prompts import user_message
from harness.runs.compare import wilson_interval
from harness.runs.config import RunSpec
from harness.runs.evidence import sample_digest
from harness.runs.parallel import Processes

# Reports (summary, plots, comparisons, anatomy) are made again at most this often while a run goes, and at its end:
# drawing them after every cell took 94% of a paper-grid run's time on the scripted backend, and rewrote its plots
# 160 times.
from harness.runs.plan import Cell, Todo
from harness.runs.results import CellResult
from harness.scoring import is_conflict, is_correct, judge


def run_group(backend, group: list[Todo], spec: RunSpec, progress, processes: Processes):
    """Generate a group of cells in one call, then score each: (row, samples) per cell. Under data parallelism only
    the main process gets the cells back (None elsewhere)."""
    cells, budgets, seeds = [], [], []
    for variant, task, length, seed in group:
        cell = Cell(variant, task, length, seed, generate(task, spec.base, length, spec.samples, seed))
        cell.prompts = [backend.chat_prompt(user_message(problem, spec.prompt)) for problem in cell.problems]
        cell_seed = zlib.crc32(f"{seed}|{task.label}|{spec.base}|{length}".encode())
        cells.append(cell)
        budgets += [spec.answer.budget(task, spec.base, length, backend.count_tokens)] * len(cell.problems)
        seeds += row_seeds(cell_seed, len(cell.problems))  # a cell's samples do not depend on its group
    started = time.perf_counter()
    mine = backend.generate(
        [prompt for cell in cells for prompt in cell.prompts],
        budgets,
        Sampling.named(spec.decoding),
        seed=seeds,
        on_batch=progress.update,
        shard=processes.shard,
        answer=spec.answer,
    )
    generations = processes.gather(mine)
    wall = time.perf_counter() - started
    if generations is None:
        return None
    total_tokens = max(1, sum(g.tokens for g in generations))
    rows_in_batch = batch_rows(len(generations), backend.batch_size)
    results, offset = [], 0
    for cell in cells:
        own = slice(offset, offset + len(cell.problems))
        offset += len(cell.problems)
        share = wall * sum(g.tokens for g in generations[own]) / total_tokens  # the group's time, split by tokens
        tokens_per_s = total_tokens / wall if wall > 0 else 0.0
        row, samples = score_cell(backend, cell, spec, generations[own], share, tokens_per_s)
        if spec.invariance_check:
            batched = (budgets[own], seeds[own], rows_in_batch[own])
            row = invariance_check(backend, cell, spec, samples, batched, row, progress)
        results.append((row, samples))
    return results


def batch_rows(count: int, batch_size: int) -> list[int]:
    """For each of ``count`` prompts generated in one call, the rows of the batch it was generated in (the batches
    of ChatBackend.generate: consecutive, ``batch_size`` rows, the last one shorter)."""
    return [min(batch_size, count - index // batch_size * batch_size) for index in range(count)]


def invariance_check(
    backend, cell: Cell, spec: RunSpec, samples: list[dict], batched: tuple, row: CellResult, progress
) -> CellResult:
    """Generate the cell's first K problems again in a batch of another size (same budgets and seeds) and count the
    outputs and verdicts that differ from the batched run's ``samples``, scored by the same rule.

    A problem generated in a batch of several rows is generated again alone; one that was generated alone (a
    ``--batch-size 1`` run, or the last row of a group) is generated again in a batch of two, beside the cell's
    next problem (or a copy of itself in a one-problem cell): the check never compares a batch size with itself.
    ``flip_batch`` records the re-run's batch sizes."""
    budgets, seeds, rows_in_batch = batched
    k = min(spec.invariance_check, len(cell.problems))
    outputs = verdicts = 0
    sizes = set()
    for index in range(k):
        rows = [index] if rows_in_batch[index] > 1 else [index, (index + 1) % len(cell.problems)]
        sizes.add(len(rows))
        again = backend.generate(
            [cell.prompts[i] for i in rows],
            [budgets[i] for i in rows],
            Sampling.named(spec.decoding),
            seed=[seeds[i] for i in rows],
            batch_size=len(rows),
            answer=spec.answer,
        )[0]
        problem, before = cell.problems[index], samples[index]
        progress.update(1)
        outputs += again.text != before["output"]
        answer = judge(
            again.text, spec.base, problem.expression, spec.answer, not again.finished, problem.truncate
        ).answer
        verdicts += is_correct(answer, problem.answer, spec.base) != before["correct"]
    flip_batch = ",".join(str(size) for size in sorted(sizes))
    return replace(row, flip_k=k, flip_outputs=outputs, flip_verdicts=verdicts, flip_batch=flip_batch)


def score_cell(backend, cell: Cell, spec: RunSpec, generations, wall: float, tokens_per_s: float):
    variant, task, length, problems, prompts = cell.variant, cell.task, cell.length, cell.problems, cell.prompts
    key = {
        "model": variant.model.name,
        "precision": variant.precision.name,
        "adapter": variant.adapter or "",
        "task": task.name,
        "operands": task.operands,
        "truncate": task.truncate or "",
        "base": spec.base,
        "length": length,
    }
    samples, correct, no_answer, conflicts = [], 0, 0, 0
    for problem, prompt, generation in zip(problems, prompts, generations, strict=True):
        sample = judged_sample(backend, spec, problem, prompt, generation, {**key, "seed": cell.seed})
        samples.append(sample)
        correct += sample["correct"]
        no_answer += sample["extracted"] is None
        conflicts += is_conflict(sample["rule"])
    low, high = wilson_interval(correct, len(problems))
    tokens = sum(g.tokens for g in generations)
    precision = variant.precision
    row = CellResult(
        model=variant.model.name,
        precision=precision.name,
        weight_dtype=precision.weight_dtype,
        activation_dtype=backend.activation_dtype,
        task=task.name,
        operands=task.operands,
        base=spec.base,
        length=length,
        n=len(problems),
        correct=correct,
        accuracy=correct / len(problems),
        ci_low=low,
        ci_high=high,
        seed=cell.seed,
        truncate=task.truncate or "",
        decoding=spec.decoding,
        method=precision.method,
        weight_bits=precision.weight_bits,
        group_size=precision.group_size or "",
        footprint_mb=backend.footprint_mb,
        adapter=variant.adapter or "",
        backend=backend.name,
        no_answer=no_answer,
        conflicts=conflicts,
        gen_tokens=tokens,
        wall_s=wall,
        tokens_per_s=tokens_per_s,
        kernel=backend.kernel,
        matmul_precision=backend.matmul_precision,
        kv_cache=backend.kv_cache,
        mix=precision.mix,
        rounding=precision.rounding,
        prompt_style=spec.prompt,
        answer_mode=spec.answer.describe(),
        **length_fields(samples),
        **served_fields(backend, Sampling.named(spec.decoding), generations),
    )
    return row, samples


def judged_sample(backend, spec: RunSpec, problem, prompt: str, generation, key: dict) -> dict:
    """One problem's sample: its output judged as spec says, the rule that read its answer, its digest."""
    truncated = not generation.finished
    extraction = judge(generation.text, spec.base, problem.expression, spec.answer, truncated, problem.truncate)
    answer = extraction.answer
    thinking = spec.answer.split(generation.text)[0]
    sample = {
        **key,
        "index": problem.index,
        "expression": problem.expression,
        "prompt": prompt,
        "output": generation.text,
        "extracted": answer,
        "rule": extraction.rule,
        "gold": problem.answer,
        "correct": is_correct(answer, problem.answer, spec.base),
        "tokens": generation.tokens,
        "thinking_tokens": min(generation.tokens, backend.count_tokens(thinking)) if thinking else 0,
        "truncated": truncated,
    }
    sample["digest"] = sample_digest(sample)
    return sample


def length_fields(samples: list[dict]) -> dict:
    """A row's lengths: generated tokens per problem (mean, median, 90th percentile, most), thinking and answer tokens,
    and how many generations the budget cut."""
    import numpy as np

    tokens = np.array([sample["tokens"] for sample in samples], dtype=float)
    thinking = np.array([sample["thinking_tokens"] for sample in samples], dtype=float)
    return {
        "tokens_mean": float(tokens.mean()),
        "tokens_median": float(np.median(tokens)),
        "tokens_p90": float(np.percentile(tokens, 90)),
        "tokens_max": int(tokens.max()),
        "thinking_tokens_mean": float(thinking.mean()),
        "answer_tokens_mean": float((tokens - thinking).mean()),
        "truncated": sum(sample["truncated"] for sample in samples),
    }


def served_fields(backend, sampling: Sampling, generations) -> dict:
    """What a row records about where its outputs came from: loaded here, or a served model's declared precision,
    the endpoint(s) and model id(s) that answered the cell's requests, request mode, request parameters, the server's
    prompt-token count and how many replies ran past their budget or first line and were cut."""
    if backend.name != "api":
        return {"precision_source": "loaded", "decoding_params": sampling_params(sampling)}
    return {
        "precision_source": "declared",
        "endpoint": ",".join(sorted({g.endpoint for g in generations})),
        "served_model": ",".join(sorted({g.model for g in generations})),
        "request_mode": backend.endpoint.mode,
        "decoding_params": backend.decoding_note(sampling),
        "prompt_tokens": sum(g.prompt_tokens for g in generations),
        "cut_replies": sum(g.cut for g in generations),
    }


def sampling_params(sampling: Sampling) -> str:
    if not sampling.do_sample:
        return "greedy (argmax)"
    return f"temperature {sampling.temperature}, top_p {sampling.top_p}, top_k {sampling.top_k}, seed per problem"
