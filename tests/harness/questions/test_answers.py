"""Every in-process backend stops where the run's answer mode says (harness/questions/answers.py): the paper's first
line, and a mode of the tests' own that stops at the first word, on the real embedded model through transformers and
llama.cpp.
(The served backend's turn is in tests/harness/backends/test_api.py.)"""

import pytest

from harness.backends import Sampling
from harness.models import get_model, get_precision
from harness.models.weights import variant_weights
from harness.questions.answers import FIRST_LINE
from harness.questions.problems import Task, generate
from harness.questions.prompts import user_message
from tests.answer_modes import FIRST_WORD, stopped_at_first_word

PROBLEMS = generate(Task("add"), 10, 2, 3, seed=0) + generate(Task("mul"), 10, 1, 2, seed=0)


@pytest.fixture(scope="module")
def llamacpp_q41():
    from harness.backends.llamacpp import LlamaCppBackend

    model = get_model("smollm2")
    precision = get_precision(model, "gguf-q4_1")
    backend = LlamaCppBackend(variant_weights(model, precision), precision, batch_size=4)
    yield backend
    backend.close()


@pytest.mark.parametrize("engine", ["hf", "llamacpp"])
def test_each_backend_stops_where_the_answer_mode_says(engine, smollm2_fp32, request):
    backend = smollm2_fp32 if engine == "hf" else request.getfixturevalue("llamacpp_q41")
    prompts = [backend.chat_prompt(user_message(problem)) for problem in PROBLEMS]
    budgets = [FIRST_LINE.budget(Task(p.task), 10, p.length, backend.count_tokens) for p in PROBLEMS]
    lines = backend.generate(prompts, budgets, Sampling.named("greedy"), answer=FIRST_LINE, batch_size=1)
    words = backend.generate(prompts, budgets, Sampling.named("greedy"), answer=FIRST_WORD, batch_size=1)
    for line, word in zip(lines, words, strict=True):
        assert "\n" not in line.text.strip(), "the first line, stopped at its newline"
        if " " in line.text.strip():
            assert stopped_at_first_word(word.text, line.text), (word.text, line.text)
            assert word.tokens < line.tokens, "it stopped at the first word, not at the line's end"
        else:  # no space in the line: the newline that ended it does not stop this mode
            assert word.text.lstrip().startswith(line.text.strip()) and len(word.text) > len(line.text), word.text
