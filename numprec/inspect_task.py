"""numprec's arithmetic as an inspect_ai task, registered with the package (entry point ``inspect_ai``):

    inspect eval numprec/arithmetic -T task=add -T length=3 -T samples=40 --model hf/local -M model_path=DIR

The dataset is a cell's problems (harness.problems, the seed's own), each sample's input the user message harness.eval
sends (harness.questions.prompts; inspect's provider applies the model's chat template), the target its gold answer; the
scorer is numprec's: the first non-blank line of the output (where numprec's backends stop) read by harness/scoring/ and
compared exactly. Generation is greedy within the cell's budget (harness/questions/answers.py, counted with the
``budget_model`` tokenizer)."""

from __future__ import annotations

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState, generate

from harness.questions.problems import parse_task
from harness.tasks import cell_budget, cell_documents, verdict


@scorer(metrics=[accuracy(), stderr()])
def numprec_exact_match():
    """numprec's reading of the answer and its exact match (harness/scoring/)."""

    async def score(state: TaskState, target: Target) -> Score:
        extraction, hit = verdict(state.output.completion, state.metadata)  # the target is metadata's gold
        return Score(value=CORRECT if hit else INCORRECT, answer=extraction.answer, explanation=extraction.rule)

    return score


@task
def arithmetic(
    task: str = "add",
    length: int = 3,
    samples: int = 40,
    seed: int = 0,
    base: int = 10,
    prompt: str = "few-shot",
    budget_model: str = "smollm2",
) -> Task:
    """One cell of the paper's grid: ``task`` (add, iter_add:3, mul, mul:trunc=L) at operand length ``length``."""
    cell = parse_task(task)
    documents = cell_documents(cell, base, length, samples, seed, prompt)
    dataset = MemoryDataset(
        [Sample(id=doc["index"], input=doc["prompt"], target=doc["gold"], metadata=doc) for doc in documents],
        name=f"numprec-{cell.label}-n{length}-seed{seed}",
    )
    return Task(
        dataset=dataset,
        solver=generate(),
        scorer=numprec_exact_match(),
        config=GenerateConfig(temperature=0.0, max_tokens=cell_budget(cell, base, length, budget_model)),
    )
