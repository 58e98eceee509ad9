"""The allowed range of every numeric setting, one object per range: ``Bound`` gives the argparse type of a flag
(``--samples``), the pydantic validator of a config key (``samples:``) and the check of a value computed from both,
with the same words. An upper bound says why it is there. Lists refuse duplicates."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import AfterValidator

from harness.core.errors import UserError


@dataclass(frozen=True)
class Bound:
    """The allowed range of one numeric setting. ``above``/``below`` are exclusive ends; ``why`` explains the
    upper end (a bound no one can see the reason for reads as arbitrary)."""

    low: float | None = None
    high: float | None = None
    why: str = ""
    above: float | None = None
    below: float | None = None
    kind: type = int

    def problem(self, value: float) -> str | None:
        """What is wrong with ``value``, or None."""
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        got = f", got {_number(value)}"
        if self.low is not None and value < self.low:
            return f"must be at least {_number(self.low)}{got}"
        if self.above is not None and value <= self.above:
            return f"must be greater than {_number(self.above)}{got}"
        reason = f" ({self.why})" if self.why else ""
        if self.high is not None and value > self.high:
            return f"must be at most {_number(self.high)}{reason}{got}"
        if self.below is not None and value >= self.below:
            return f"must be less than {_number(self.below)}{reason}{got}"
        return None

    def check(self, value: Any, name: str) -> Any:
        """``value``, or a UserError naming the setting."""
        kinds = (int, float) if self.kind is float else (int,)
        if isinstance(value, bool) or not isinstance(value, kinds):
            what = "a number" if self.kind is float else "an integer"
            raise UserError(f"{name} must be {what}, got {value!r}")
        problem = self.problem(value)
        if problem:
            raise UserError(f"{name} {problem}")
        return value

    def arg(self, text: str) -> Any:
        """The argparse ``type=`` of a flag with this range."""
        value = parse_number(text, self.kind)
        problem = self.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    @property
    def field(self) -> AfterValidator:
        """Pydantic metadata: ``Annotated[int, SAMPLES.field]``."""

        def validate(value: Any) -> Any:
            problem = None if value is None else self.problem(value)
            if problem:
                raise ValueError(problem)
            return value

        return AfterValidator(validate)


def _number(value: float) -> str:
    """1000000 as 1,000,000 (not 1e+06); 0.001 as 0.001."""
    return f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e18 else f"{value:g}"


def parse_number(text: str, kind: type = int) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"'{text}' is not {what}") from None


# Ranges shared by several commands. The upper ends are far past any sensible run, and each says why.
SEED = Bound(0, 2**32 - 1, "transformers' set_seed hands the seed to numpy, which takes 32 bits")
SAMPLES = Bound(1, 100_000, "at 100,000 problems a cell's 95% interval is already +-0.3 points; add seeds instead")
BATCH_SIZE = Bound(1, 16_384, "rows decoded or trained at once; more outgrows any GPU's memory")
# Not this machine's core count: a config written for a cluster node must load on a small login node too.
THREADS = Bound(1, 1024, "more threads than any machine here has cores; oversubscribed threads only slow a run")
REPEATS = Bound(1, 100, "timed passes; the minimum of a few is what a benchmark reports")
TENSOR_PARALLEL = Bound(1, 64, "vLLM splits attention heads across GPUs; no registry model has more than 64")
PROBABILITY = Bound(0, below=1, kind=float)
LEARNING_RATE = Bound(above=0, high=1, why="AdamW diverges long before", kind=float)
WEIGHT_DECAY = Bound(0, 1, "AdamW multiplies weights by 1 - lr x decay each step", kind=float)
STEPS = Bound(1, 10_000_000, "the paper trains 100,000 steps")
SEARCH_GROUPS = Bound(0, 10_000, "groups a search step scores beside the rules; a 70B model has under 400 blocks x 4")


def unique(values: Sequence[Any], what: str, error: type[Exception] = UserError) -> list:
    """``values`` as a list, or ``error`` naming the repeated entry (a repeated length would be evaluated and
    written twice). Parsers raise the error their caller expects: argparse's type error, pydantic's ValueError."""
    seen: set = set()
    for value in values:
        if value in seen:
            raise error(f"{what} lists {value} twice; give each once")
        seen.add(value)
    return list(values)


def parse_int_list(text: str) -> list[int]:
    """'1,2,5-7' -> [1, 2, 5, 6, 7]; ValueError on anything else (or on a repeated entry)."""
    values: list[int] = []
    parts = [part.strip() for part in text.split(",")]
    if any(parts) and not all(parts):  # "0,,1": a value left out, not a list of two
        raise ValueError(f"'{text}' has an empty entry; write the list without it, like 1,2,3")
    for part in parts:
        if not part:
            continue
        dash = part.find("-", 1)  # a leading '-' is a sign, not a range
        try:
            bounds = [int(part)] if dash < 0 else [int(part[:dash]), int(part[dash + 1 :])]
        except ValueError:
            raise ValueError(f"'{text}' is not a list of integers like 1,2,3 or 1-13") from None
        if len(bounds) == 2 and bounds[1] < bounds[0]:
            raise ValueError(f"range {part} runs backwards; write {bounds[1]}-{bounds[0]}")
        if len(bounds) == 2 and bounds[1] - bounds[0] >= 10_000:
            raise ValueError(f"range {part} has over 10,000 entries; no setting here takes that many")
        values.extend(range(bounds[0], bounds[-1] + 1))
    if not values:
        raise ValueError(f"'{text}' names no integers; give a list like 1,2,3 or 1-13")
    return unique(values, f"'{text}'", error=ValueError)
