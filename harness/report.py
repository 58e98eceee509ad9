"""``python -m harness.report``: summary.md and its figures for one run or several; the command lives in
harness/reports/summary.py."""

from harness.core.cli import run
from harness.reports.summary import main

if __name__ == "__main__":
    run(main)
