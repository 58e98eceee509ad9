"""Config files (YAML) as validated models, one way for every config numprec reads: the eval grids
(``eval_configs/*.yaml``), the model and precision registries, fine-tuning recipes and from-scratch sweeps. A problem
is one UserError line naming the file and the key; a file no schema check reaches (an alias that contains itself,
nesting past 32 levels, aliases that expand past 100,000 values) is refused before validation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from harness.core.bounds import parse_int_list, unique
from harness.core.errors import UserError


class StrictModel(BaseModel):
    """A config section: unknown keys are an error, so a typo cannot pass silently."""

    model_config = ConfigDict(extra="forbid")


M = TypeVar("M", bound=StrictModel)


def _distinct(values: list) -> list:
    return unique(values, "the list", error=ValueError)  # pydantic reports a ValueError as the key's message


# A list of names (models, precisions) in a config: strings (not numbers, lists or mappings), at least one, none
# repeated (a repeat runs or writes the same cell twice).
Names = Annotated[list[str], Field(min_length=1), AfterValidator(_distinct)]


def _lengths(value: Any) -> Any:
    """Lengths as a list [1, 2], a range string "1-13" or one number; each once."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, str):
        return parse_int_list(value)  # its ValueError becomes the key's one-line message
    return value


Lengths = Annotated[list[int], BeforeValidator(_lengths), Field(min_length=1), AfterValidator(_distinct)]


def load_yaml_model(path: Path, model: type[M]) -> M:
    """Read a YAML file into ``model``; any problem is one UserError line naming the file and the key."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', err)})") from None
    except RecursionError:
        raise UserError(f"{path}: nested deeper than any config ({YAML_DEPTH} levels at most)") from None
    problem = _unreasonable_structure(raw)
    if problem:
        raise UserError(f"{path}: {problem}; a config is a few keys and lists")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        keys = ", ".join(list(model.model_fields)[:3])
        raise UserError(f"{path}: expected a mapping of keys ({keys}, ...), got {type(raw).__name__}")
    try:
        return model(**raw)
    except ValidationError as err:
        raise UserError(f"{path}: {validation_message(err, model)}") from None


YAML_DEPTH, YAML_VALUES = 32, 100_000


def _unreasonable_structure(raw: Any) -> str | None:
    """What makes a loaded YAML value no config: an alias that contains itself (``&a [*a]``), nesting past
    YAML_DEPTH, or aliases that expand to more than YAML_VALUES values (a "billion laughs" file would take
    validation hours). The walk stops at the first of them."""
    count = 0
    stack: list[tuple[Any, int, frozenset]] = [(raw, 0, frozenset())]
    while stack:
        value, depth, ancestors = stack.pop()
        count += 1
        if count > YAML_VALUES:
            return f"its aliases expand to more than {YAML_VALUES:,} values"
        if depth > YAML_DEPTH:
            return f"nested deeper than any config ({YAML_DEPTH} levels at most)"
        if isinstance(value, (dict, list)):
            if id(value) in ancestors:
                return "an alias contains itself (a recursive anchor)"
            inner = ancestors | {id(value)}
            children = list(value.keys()) + list(value.values()) if isinstance(value, dict) else value
            stack.extend((child, depth + 1, inner) for child in children)
    return None


def validation_message(err: ValidationError, model: type[BaseModel]) -> str:
    """The first problem pydantic found, as 'key.sub: what is wrong' (with the allowed keys after a typo)."""
    first = err.errors()[0]
    # Union members and list indices add noise to the location; the key path is what the user edits.
    location = ".".join(str(part) for part in first["loc"] if not str(part).startswith(("list[", "function-"))) or (
        "(top level)"
    )
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "too_short":
        message = "must not be empty"
    elif first["type"] == "missing":
        message = "is required"
    if first["type"] == "extra_forbidden" and len(first["loc"]) == 1:
        message += f" (allowed keys: {', '.join(model.model_fields)})"
    elif first["type"] == "missing" and len(first["loc"]) == 1:
        required = [name for name, info in model.model_fields.items() if info.is_required()]
        message += f" (every config needs: {', '.join(required)})"
    return f"{location}: {message}"
