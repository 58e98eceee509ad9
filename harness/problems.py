"""The paper's problem generator, where its users import it from and run it as ``python -m harness.problems``; it
lives in harness/questions/problems.py."""

from harness.core.cli import run
from harness.questions.problems import *  # noqa: F403  (the generator's public names, as documented)
from harness.questions.problems import main

if __name__ == "__main__":
    run(main)
