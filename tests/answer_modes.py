"""An answer mode of the tests' own, to show that every backend stops where the run's answer mode says rather than at
a newline it knows of: the answer is the first word (generation stops at the first space after some text)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.questions.answers import FirstLine


@dataclass(frozen=True)
class FirstWord(FirstLine):
    name = "first-word"
    server_stop = (" ",)
    continues_blank = False

    def done(self, text: str) -> bool:
        return " " in text.lstrip()

    def may_finish(self, token_text: str) -> bool:
        return " " in token_text

    def kept(self, text: str) -> str:
        start = len(text) - len(text.lstrip())
        space = text.find(" ", start)
        return text if space < 0 else text[: space + 1]


FIRST_WORD = FirstWord()


def stopped_at_first_word(text: str, line: str) -> bool:
    """Whether ``text``, generated greedily with FIRST_WORD, stopped at the token that put the first space after
    some text into it (a token holds more than a space: " +" ends "45 +"), where ``line`` (the same prompt under
    the first-line mode) went on."""
    first = line.lstrip().split(" ")[0]
    stripped = text.lstrip()
    return FIRST_WORD.done(text) and stripped.startswith(first + " ") and line.lstrip().startswith(stripped)
