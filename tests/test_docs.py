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


# ---------------------------------------------------------------- numbers quoted from reports (issue 42)

# docs/results.md, and README's paragraph on the main job: where every measured number must come from a report
RESULTS_PAGES = {
    "docs/results.md": lambda text: text,
    "README.md": lambda text: text.split("## What the main job shows", 1)[1].split("\n## ", 1)[0],
}


@pytest.mark.parametrize("page", [str(page.relative_to(ROOT)) for page in PAGES])
def test_every_number_a_page_quotes_from_a_report_is_the_reports(page):
    """A quoted number links the report file it comes from, the link's title naming the rows and the value
    (tests/quoted.py); it must be that value, as written, and every link defined must be quoted, in order."""
    from tests.quoted import check

    assert check((ROOT / page).read_text(encoding="utf-8"), ROOT / page) == []


@pytest.mark.parametrize("page", list(RESULTS_PAGES))
def test_the_results_pages_quote_no_measured_number_without_its_report(page):
    from tests.quoted import unmarked

    assert unmarked(RESULTS_PAGES[page]((ROOT / page).read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize("page", [str(page.relative_to(ROOT)) for page in PAGES])
def test_the_generated_tables_are_the_reports(page):
    """Tables between <!-- generated: KIND REPORT --> fences are made again from their reports: no difference."""
    from tests.quoted import GENERATED, generated_tables

    text = (ROOT / page).read_text(encoding="utf-8")
    assert generated_tables(text) == text, f"python -m tests.quoted --write {page}"
    if page == "docs/results.md":
        assert len(GENERATED.findall(text)) == 4  # the main job, embedded and base precisions, the formats


def test_the_check_catches_an_edited_integer_swapped_figures_and_a_removed_link():
    """On docs/results.md itself: an integer changed, two figures swapped with their links, a link removed from its
    number (the number left in the text) are each refused; the page as committed passes."""
    from tests.quoted import QUOTE, check

    page = ROOT / "docs" / "results.md"
    text = page.read_text(encoding="utf-8")
    assert check(text, page) == []
    quotes = [m for m in QUOTE.finditer(text) if m["id"] != "given"]
    once = [m for m in quotes if sum(q["id"] == m["id"] for q in quotes) == 1]
    integer = next(m for m in once if m["number"].isdigit())
    edited = text.replace(integer[0], f"[{int(integer['number']) + 1}][{integer['id']}]", 1)
    assert any("quoted as" in problem for problem in check(edited, page))
    first, second = quotes[:2]
    assert first["number"] != second["number"]
    swapped = text[: first.start()] + second[0] + text[first.end() : second.start()] + first[0] + text[second.end() :]
    assert any("order" in problem for problem in check(swapped, page))
    removed = text.replace(integer[0], integer["number"], 1)
    assert (
        any("no number quotes it" in problem for problem in check(removed, page))
        or text.count(f"][{integer['id']}]") > 1
    )


def test_the_check_refuses_figures_that_differ_from_their_reports_and_passes_the_reports_own():
    """Figures docs/results.md once quoted wrong (a rounded neighbour, a curve's minimum and maximum misread), linked to
    their reports' rows: refused; the reports' own figures pass."""
    from tests.quoted import check

    def snapshots(sizes: range) -> str:
        return ",".join(f"smollm2 fp32 +samples-{size}" for size in sizes)

    base = "embedded-quick-n200/results.csv | series=smollm2 fp32 & task=iter_add:3 & length=1 | accuracy"
    curve = "embedded-curve/results.csv"
    mul = f"{curve} | series={snapshots(range(1600, 9601, 1600))} & task=mul & length=2 | min:accuracy"
    add = f"{curve} | series={snapshots(range(12800, 22401, 1600))} & task=add & length=4,5 | {{}}:accuracy"
    quoted = [("0.065", "0.060", base), ("0.10", "0.03", mul), ("0.70", "0.63", add.format("min"))]
    quoted.append(("0.73", "0.77", add.format("max")))

    def page(figures: list[str]) -> str:
        lines = [" ".join(f"[{figure}][q{i + 1}]" for i, figure in enumerate(figures)), ""]
        for i, (_, _, key) in enumerate(quoted):
            where, _, rows = key.partition(" | ")
            lines.append(f'[q{i + 1}]: ../reports/{where} "{rows}"')
        return "\n".join(lines)

    results = ROOT / "docs" / "results.md"
    assert len(check(page([wrong for wrong, _, _ in quoted]), results)) == 4
    assert check(page([right for _, right, _ in quoted]), results) == []
