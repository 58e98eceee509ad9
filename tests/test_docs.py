"""README and docs/ cannot rot: every relative link resolves, and every ``python -m X --flag`` they show is a real
flag of numprec's command X (read from the command's own --help)."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "reports" / "README.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
SPAN = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"-m ((?:harness|finetune|scratch|bench)\.[\w.]+)((?:[ \t]+(?:\\\n[ \t]*)?[^\s|;&`]+)*)")


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """The relative links of a markdown page whose target does not exist."""
    text = page.read_text(encoding="utf-8") if text is None else text
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    return broken


@cache
def command_flags(module: str) -> frozenset[str] | None:
    """The flags ``python -m module`` takes, from its own --help; None where it is no numprec command."""
    try:
        main = importlib.import_module(module).main
    except (ImportError, AttributeError):
        return None
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), contextlib.suppress(SystemExit):
        main(["--help"])
    return frozenset(re.findall(r"(?<![\w-])--[a-z][\w-]*", help_text.getvalue()))


def unknown_flags(text: str) -> list[str]:
    """``MODULE --flag`` for each flag of a numprec command, shown in code (a fenced block or an inline span), that
    the command does not take, and ``MODULE`` for a command that does not exist."""
    code = [block for block in FENCE.findall(text)] + SPAN.findall(FENCE.sub("", text))
    found = []
    for snippet in code:
        for module, args in COMMAND.findall(snippet):
            flags = command_flags(module)
            if flags is None:
                found.append(module)
                continue
            for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", args):
                if flag not in flags:
                    found.append(f"{module} {flag}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert not broken_links(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_command_flag_shown_is_real(page):
    assert not unknown_flags(page.read_text(encoding="utf-8"))


def test_the_checks_find_a_planted_broken_link_and_unknown_flag():
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert broken_links(readme, text + "\nSee [the gone page](docs/gone.md).\n") == ["docs/gone.md"]
    planted = text + "\n```bash\n.venv/bin/python -m harness.eval --tasks add \\\n    --sampels 5\n```\n"
    assert unknown_flags(planted) == ["harness.eval --sampels"]
    assert unknown_flags("run `python -m harness.evaluate --out x`") == ["harness.evaluate"]
    assert unknown_flags("run `python -m harness.eval --samples 5 --out x`") == []


def test_readme_is_the_first_screen():
    """What numprec is, the two commands, the main job and its picture, the main uses, links: the rest is in docs/."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120, "reference material belongs in docs/"
    for docs_page in sorted((ROOT / "docs").glob("*.md")):
        if docs_page.name != "README.md":
            assert f"docs/{docs_page.name}" in text, f"README links {docs_page.name}"
