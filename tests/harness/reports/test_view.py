"""harness.view in a real browser: Debian's Chromium, headless, driven by Selenium through Debian's chromedriver. The
page of a committed reference run loads from a file URL with no network and no console error, draws a line per
series, lists exactly a clicked cell's samples, and its wrong-only filter exactly that cell's wrong answers.

Skipped where Chromium or its driver is missing, unless NUMPREC_REQUIRE_BROWSER=1 (CI installs both)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.harness.helpers import ROOT, run_module
from tests.needs import require

REFERENCE = ROOT / "reports" / "quick-greedy-n40-seed0"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    require(
        bool(CHROMIUM and DRIVER),
        "NUMPREC_REQUIRE_BROWSER",
        "no Chromium and chromedriver here",
        "apt-get install chromium chromium-driver",
    )
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,2000",
    ):
        options.add_argument(flag)
    # the page must need no network: every request to a host fails in this browser
    options.add_argument("--host-resolver-rules=MAP * ~NOTFOUND")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    yield driver
    driver.quit()


def reference_cells() -> dict[str, list[dict]]:
    cells: dict[str, list[dict]] = {}
    for line in (REFERENCE / "samples.jsonl").read_text().splitlines():
        sample = json.loads(line)
        cells.setdefault(f"{sample['model']} {sample['precision']}|{sample['task']}|{sample['length']}", []).append(
            sample
        )
    return cells


def listed(driver) -> list[tuple[int, str]]:
    rows = driver.find_elements("css selector", "#samples tbody tr")
    return [(int(row.get_attribute("data-index")), row.find_elements("tag name", "td")[3].text) for row in rows]


def test_the_page_of_a_reference_run_in_chromium(browser, tmp_path):
    from selenium.webdriver import ActionChains

    page = tmp_path / "view.html"
    made = run_module("harness.view", str(REFERENCE), "--out", str(page))
    assert made.returncode == 0 and not made.stderr, made.stderr
    browser.get(page.as_uri())
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe
    charts = browser.find_elements("css selector", "#charts .js-plotly-plot")
    series = {f"{s['model']} {s['precision']}" for cell in reference_cells().values() for s in cell}
    assert len(charts) == 3 and len(series) == 4  # add, iter_add:3, mul; 4 series
    for chart in charts:
        names = browser.execute_script(
            "return arguments[0].data.filter(t => t.meta === 'series').map(t => t.name)", chart
        )
        assert sorted(names) == sorted(series), names

    # a real click on the point of smollm2-arith nf4, add n=2
    first = charts[0]
    trace = browser.execute_script(
        "return arguments[0].data.filter(t => t.meta === 'series').findIndex(t => t.name === 'smollm2-arith nf4')",
        first,
    )
    point = first.find_elements("css selector", ".scatterlayer .trace")[3 * trace + 2].find_elements(
        "css selector", ".points path"
    )[1]
    ActionChains(browser).move_to_element(point).pause(0.3).click().perform()
    own = reference_cells()["smollm2-arith nf4|add|2"]
    shown = listed(browser)
    assert shown == [(s["index"], s["output"]) for s in own], "exactly the clicked cell's samples, in order"
    assert "smollm2-arith nf4, add base 10 n=2" in browser.find_element("id", "cell-title").text

    browser.find_element("id", "wrong-only").click()
    wrong = [(s["index"], s["output"]) for s in own if not s["correct"]]
    assert wrong and listed(browser) == wrong, "exactly the cell's wrong answers"
    browser.find_element("id", "wrong-only").click()

    # discordant with fp32: the problems where the two series' verdicts differ
    fp32 = {s["index"]: s["correct"] for s in reference_cells()["smollm2-arith fp32|add|2"]}
    browser.execute_script(
        "const s = document.getElementById('discordant'); s.value = 'smollm2-arith fp32';"
        "s.dispatchEvent(new Event('change'));"
    )
    assert listed(browser) == [(s["index"], s["output"]) for s in own if s["correct"] != fp32[s["index"]]]

    header = browser.find_elements("css selector", "#comparisons thead th")
    [p_holm] = [th for th in header if th.text.startswith("p_holm")]
    p_holm.click()
    values = [float(row.find_elements("tag name", "td")[-1].text) for row in browser.find_elements(
        "css selector", "#comparisons tbody tr")]  # fmt: skip
    assert values == sorted(values) and len(values) > 3
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(str(tmp_path / "view.png"))
    assert (tmp_path / "view.png").stat().st_size > 10_000
    assert not [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
