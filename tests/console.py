"""numprec's own stderr lines, as formats: a command's console is these and nothing else (issue 28: other libraries'
warnings, banners and "failed to load" lines are silenced unless --verbose asks for them, harness/core/quiet.py).

``foreign_lines(stderr)`` lists what matches none of them; a test of a command's happy path or bad input asserts that
it is empty. Each format names the code that prints it."""

from __future__ import annotations

import re

NUMBER = r"[\d,.]+"
BAR_FORMATS = [
    # tqdm progress bars (harness.eval's problems, scratch.sweep's cells, finetune.train's steps), also while they
    # are redrawn or cleared
    r"(.*: )?\s*\d+%\|[^|]*\|\s*\d+/\d+ \[[^\]]*\]",
    r".+: \d+[^\[]* \[[^\]]*\]",  # a bar whose total is not yet known (harness.quantize's calibration)
]
OWN_FORMATS = [
    *BAR_FORMATS,
    # harness/core/cli.py: the one-line error, Ctrl-C; harness/core/startup.py: Ctrl-C while importing
    r"error: .+",
    r"interrupted: finished work is saved; rerun the same command to resume",
    r"interrupted while starting: nothing was written",
    # harness/eval.py: a finished cell, a resumed run, a repaired directory
    rf".+ n=\d+ +\d+/\d+ += [01]\.\d{{3}} \[[01]\.\d{{3}}, [01]\.\d{{3}}\]  \({NUMBER} tok/s\)",
    r"resuming in .+: \d+ of \d+ cells already done",
    r"repaired .+: .+",
    # harness/models/weights.py, harness/models/gguf.py: weights made once into the cache
    r"converting .+ to .+ \(once, ~30 s\)",
    r"merging .+'s adapter into .+ -> .+ \(once, seconds\)",
    r"writing .+: .+ with .+'s adapter merged \(once\)",
    r"requantizing .+ to \w+ \(once, seconds\)",
    # harness/rescore.py, harness/quantize.py, harness/runs/parallel.py
    r"rescored .+: .+",
    r"quantizing .+ -> .+",
    r"note: .+",
    # finetune/train.py, finetune/curve.py
    rf"step \d+/\d+: loss {NUMBER}, learning rate .+",
    r".+ is incomplete \(no .+\): skipped",
    r"learning curve: \d+ examples \(.+\)",
    r"wrote .+",
    # scratch/sweep.py
    r"\d+ of \d+ cells done; running \d+ in \d+ pack\(s\) of at most \d+ .+",
    rf"\w+ b\d+ n=\d+ +[\w-]+ d\d+ s\d+: [01]\.\d{{3}} \({NUMBER} tok/s, {NUMBER} s\)",
    r"submitted \d+ array task\(s\): job \d+",
    # bench/common.py's progress lines, bench/engines.py
    r"\[bench \d\d:\d\d:\d\d\] .+",
    r"\S+ \S+: [\d.]+ s per pass",
]
_OWN = re.compile("|".join(f"(?:{pattern})" for pattern in OWN_FORMATS))
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_BAR = re.compile("|".join(f"(?:{pattern})" for pattern in BAR_FORMATS))


def without_bars(lines: list[str]) -> list[str]:
    """``lines`` of stderr less numprec's progress bars (a command that fails after long work shows its progress
    first, then its one line).

    >>> without_bars(["scoring mixes whole: 3mix [00:01,  4.55mix/s]", "error: no mix keeps it"])
    ['error: no mix keeps it']
    """
    return [line for line in lines if not _BAR.fullmatch(_ANSI.sub("", line).rstrip())]


def foreign_lines(stderr: str) -> list[str]:
    """The lines of ``stderr`` that are none of numprec's (tqdm's redraws split at carriage returns, its cursor codes
    and blank clears aside)."""
    lines = _ANSI.sub("", stderr).replace("\r", "\n").split("\n")
    return [line for line in lines if line.strip() and not _OWN.fullmatch(line.rstrip())]


def assert_numprec_console(result) -> None:
    """A finished command printed numprec's lines only on stderr."""
    foreign = foreign_lines(result.stderr)
    assert not foreign, "other libraries spoke on stderr:\n" + "\n".join(foreign[:20])
