"""Every HTML page infersim writes renders offline in headless Chromium, every panel with its axis titles.

The pages (the `infersim run --out` report, the collective sweep chart, the validation report, the Pareto page of
`infersim sweep`) are generated into a temporary folder and opened from file:// with every other request aborted,
so a page that needs the network (plotly.js from a CDN) fails here. Any console error or page error fails the test too.

Needs the `playwright` package (the `test` extra) and a Chromium executable: the system one
(`apt-get install chromium` on Debian; `INFERSIM_CHROMIUM=/path` names another). Playwright's own browser
download is not used. Without Chromium the tests skip, unless INFERSIM_REQUIRE_BROWSER=1 (CI), when they fail.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infersim.cli import main

pytestmark = pytest.mark.browser

INSTALL_HINT = "install Chromium with `apt-get install chromium` (Debian) or set INFERSIM_CHROMIUM=/path/to/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]

RENDERED_JS = """
() => { const plots = document.querySelectorAll('.js-plotly-plot');
        return plots.length > 0 && Array.from(plots).every(p => p.querySelector('svg.main-svg') !== null); }
"""
# Per rendered plot: its cartesian panels, each with the ids and titles of its two axes, as the page's figure
# gives them (`layout`; plotly's `_fullLayout` fills a placeholder in for a missing title) and as drawn in the SVG.
PANELS_JS = """
() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => {
  const full = gd._fullLayout || {};
  const subplots = (full._subplots && full._subplots.cartesian) || [];
  const drawn = id => {
    const node = gd.querySelector(`.g-${id}title text`);
    return node ? node.textContent.trim() : '';
  };
  return {
    rendered: gd.querySelectorAll('svg.main-svg').length > 0,
    drawnPanels: gd.querySelectorAll('.cartesianlayer .subplot').length,
    panels: subplots.map(name => {
      const [xid, yid] = name.match(/^(x\\d*)(y\\d*)$/).slice(1);
      const axis = id => (gd.layout || {})[id.charAt(0) + 'axis' + id.slice(1)] || {};
      const title = id => {
        const t = axis(id).title;
        return ((typeof t === 'string' ? t : (t || {}).text) || '').trim();
      };
      return {name, x: title(xid), y: title(yid), xDrawn: drawn(xid), yDrawn: drawn(yid)};
    }),
  };
})
"""


def _require(reason: str) -> None:
    """Skip for lack of a browser, or fail when the environment says the browser test must run."""
    if os.environ.get("INFERSIM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (INFERSIM_REQUIRE_BROWSER=1)", pytrace=False)
    pytest.skip(reason)


def chromium_executable() -> str | None:
    """The Chromium to drive: $INFERSIM_CHROMIUM, /usr/bin/chromium, or one on PATH."""
    candidates = [os.environ.get("INFERSIM_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                  shutil.which("chromium-browser")]
    return next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A headless Chromium context with a fresh profile; pages get no network beyond file://."""
    executable = chromium_executable()
    if executable is None:
        _require(f"no Chromium executable found: {INSTALL_HINT}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _require("the playwright package is missing: pip install -e '.[test]'")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=executable, headless=True,
            args=LAUNCH_ARGS, offline=True)
        try:
            yield context
        finally:
            context.close()


def open_page(context: Any, path: Path) -> list[dict[str, Any]]:
    """Load `path` offline and return its plots' panels; fails on errors and on any network request."""
    errors: list[str] = []
    blocked: list[str] = []

    def route(request_route: Any) -> None:
        url = request_route.request.url
        if url.startswith("file://"):
            request_route.continue_()
        else:
            blocked.append(url)
            request_route.abort()

    page = context.new_page()
    try:
        page.route("**/*", route)
        page.on("console", lambda msg: errors.append(f"console {msg.type}: {msg.text}") if msg.type == "error"
                else None)
        page.on("pageerror", lambda err: errors.append(f"page error: {err}"))
        page.goto(path.resolve().as_uri(), wait_until="load", timeout=60_000)
        deadline = time.monotonic() + 30  # plotly draws on load; wait a little for a slow machine
        while not (errors or blocked or page.evaluate(RENDERED_JS)) and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        plots = page.evaluate(PANELS_JS)
    finally:
        page.close()
    assert not blocked, f"{path.name} asked the network for {blocked}: it is not offline-safe"
    assert not errors, f"{path.name}: {errors}"
    return plots


def check_panels(path: Path, plots: list[dict[str, Any]], panels: int) -> None:
    assert len(plots) == 1, f"{path.name}: {len(plots)} plotly plots, expected 1"
    plot = plots[0]
    assert plot["rendered"], f"{path.name}: the plot has no svg.main-svg (plotly.js did not draw it)"
    assert len(plot["panels"]) == panels and plot["drawnPanels"] == panels, plot
    for panel in plot["panels"]:
        for axis in ("x", "y"):
            assert panel[axis], f"{path.name}: panel {panel['name']} has no {axis}-axis title"
            assert panel[f"{axis}Drawn"] == panel[axis], f"{path.name}: panel {panel['name']} {axis} title not drawn"
            assert "(" in panel[axis] and panel[axis].endswith(")"), \
                f"{path.name}: {axis}-axis title {panel[axis]!r} gives no unit in parentheses"


def test_run_report_renders_offline(browser, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--set", "workload.sessions=4", "--set", "workload.turns_mean=4", "--json",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    page = out / "report.html"
    check_panels(page, open_page(browser, page), panels=6)


def test_collective_sweep_chart_renders_offline(browser, tmp_path, capsys):
    out = tmp_path / "charts"
    assert main(["collective", "--hw", "mi355x", "--tp", "2", "--sweep", "4KiB:1GiB", "--json",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    (page,) = out.glob("*.html")
    check_panels(page, open_page(browser, page), panels=1)


def test_validation_report_renders_offline(browser, tmp_path):
    from validation.report import compare_all
    from validation.report_document import write_report

    written = write_report("h200", compare_all("h200"), tmp_path)
    (page,) = [p for p in written if p.suffix == ".html"]
    check_panels(page, open_page(browser, page), panels=1)


def test_trace_prediction_page_renders_offline(browser, tmp_path, capsys):
    from tests.conftest import ROOT

    trace = ROOT / "validation" / "data" / "h200" / "engine_step" / "qwen3-32b_decode_1x1024.trace.json.gz"
    page = tmp_path / "trace.html"
    assert main(["trace", "predict", str(trace), "--hw", "h200", "--html", str(page), "--json"]) == 0
    capsys.readouterr()
    check_panels(page, open_page(browser, page), panels=2)


def test_a_page_that_needs_the_network_fails(browser, tmp_path):
    """The check itself: a chart that loads plotly.js from a CDN is caught."""
    import plotly.graph_objects as go

    page = tmp_path / "cdn.html"
    figure = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    figure.update_layout(xaxis_title="a (s)", yaxis_title="b (s)")
    page.write_text(figure.to_html(include_plotlyjs="cdn", full_html=True), encoding="utf-8")
    with pytest.raises(AssertionError, match="not offline-safe"):
        open_page(browser, page)


def test_sweep_pareto_page_renders_offline(browser, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "default", "--set", "workload.sessions=2", "--set", "workload.turns_mean=2",
                 "--grid", "serving.max_concurrency=1,2", "--grid", "spec_decode.drafts=0,2", "--seeds", "2",
                 "--jobs", "1", "--at-interactivity", "50", "--json", "--out", str(out)]) == 0
    capsys.readouterr()
    page = out / "sweep.html"
    plots = open_page(browser, page)
    # the two frontiers, and the paired deltas against the last grid key's first value (drafts=0)
    check_panels(page, plots, panels=3)
    assert plots[0]["panels"][2]["y"] == "throughput per GPU vs spec_decode.drafts=0 (%)"
