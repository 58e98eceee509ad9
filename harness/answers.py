"""The answer modes, where their users import them from; they live in harness/questions/answers.py."""

from harness.questions.answers import *  # noqa: F403  (the answer modes' public names, as documented)
