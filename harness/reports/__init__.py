"""The reports stage: what is made from runs. summary (summary.md and its figures; ``python -m harness.report``),
anatomy (how wrong answers are wrong), lengths (generated tokens), figures, and destinations (where commands that read
runs write: never into a run, never over files they did not write). The top stage below the commands."""
