"""The HTML report in a real headless Chromium (Debian's ``chromium`` package), driven by
Playwright: it renders with no console error and no request beyond its own file, its
plots are there and drawn, its script works, a page of hostile strings runs nothing, and
a screenshot is saved to ``artifacts/report-browser/`` (ignored by git; the path is
printed).

Playwright never downloads a browser here: it launches the system's Chromium through
``executable_path``. The module launches it once. It skips only when no Chromium is
installed (``bash .ci/install-system-deps.sh`` installs it); under ``CI`` it fails instead,
as the broker fixtures do.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, sync_playwright

from kgroup.analytics.report import render_html
from kgroup.testing._fixture_support import on_ci
from tests.analytics.report_rows import make_tables, ts, uid
from tests.analytics.test_report_html import HOSTILE

GROUPS, MEMBERS = 4, 6


def _chromium() -> str | None:
    for candidate in (os.environ.get("KGROUP_CHROMIUM"), "/usr/bin/chromium"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = _chromium()
    if executable is None:
        reason = (
            "no Chromium found (/usr/bin/chromium, chromium on PATH or $KGROUP_CHROMIUM); "
            "install it with `apt-get install -y chromium` or `bash .ci/install-system-deps.sh`"
        )
        if on_ci():  # as the broker fixtures do: under CI a missing browser is a failure
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tables = make_tables(groups=GROUPS, members=MEMBERS, rebalances=3, overlaps=2)
    return render_html(tables, tmp_path_factory.mktemp("report") / "report.html")


class Visit:
    """A page opened on a file, with everything the browser said while loading it."""

    def __init__(self, browser: Browser, path: Path) -> None:
        self.page: Page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.console: list[str] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("request", self._request)
        self.page.on("dialog", self._dialog)
        self.page.goto(path.as_uri(), wait_until="load")

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.console.append(f"{message.type}: {message.text}")

    def _request(self, request: Request) -> None:
        self.requests.append(request.url)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(str(dialog.message))
        dialog.dismiss()

    def count(self, selector: str) -> int:
        return int(self.page.evaluate("s => document.querySelectorAll(s).length", selector))


@pytest.fixture
def visit(browser: Browser, report: Path) -> Iterator[Visit]:
    opened = Visit(browser, report)
    try:
        yield opened
    finally:
        opened.page.close()


def test_renders_with_no_console_error_and_no_request_but_its_own(
    visit: Visit, report: Path
) -> None:
    assert visit.console == []
    assert visit.errors == []
    assert visit.requests == [report.as_uri()]
    assert visit.page.title() == "kgroup membership report"


def test_plots_are_present_in_each_section_and_drawn(visit: Visit) -> None:
    per_section = visit.page.evaluate(
        """() => Object.fromEntries(
            Array.from(document.querySelectorAll("main > section")).map(s => [
                s.id,
                Array.from(s.querySelectorAll("svg.plot")).map(p => p.dataset.plot).sort(),
            ]))"""
    )
    assert per_section == {
        "safety": [],
        "summary": [],
        "groups": sorted(["bars"] * GROUPS + ["histogram"] * 2 * GROUPS + ["timeline"] * GROUPS),
        "heartbeats": ["histogram", "histogram"],
        "unavailability": ["hbars"],
        "churn": [],
    }
    # The group with the overlaps is open: its timeline is laid out and has a bar per
    # owned interval (4 generations x 12 partitions) and the overlaps outlined.
    timeline = visit.page.locator("#group-0 svg.plot[data-plot=timeline]")
    box = timeline.bounding_box()
    assert box is not None and box["width"] > 600 and box["height"] > 100
    assert visit.count("#group-0 svg[data-plot=timeline] rect[fill]") == 4 * 2 * MEMBERS
    assert visit.count("#group-0 svg[data-plot=timeline] rect.ov") == 2 * 2
    for selector in ("#heartbeats svg.plot", "#unavailability svg.plot"):
        for plot in visit.page.locator(selector).all():
            drawn = plot.bounding_box()
            assert drawn is not None and drawn["width"] > 200 and drawn["height"] > 50


def test_safety_comes_first_on_screen(visit: Visit) -> None:
    verdict = visit.page.locator("#safety .verdict.bad")
    assert verdict.is_visible()
    assert "2 overlaps found in 1 group" in verdict.inner_text()
    tops = visit.page.evaluate(
        "() => Array.from(document.querySelectorAll('main > section'))"
        ".map(s => s.getBoundingClientRect().top)"
    )
    assert tops == sorted(tops)
    box = verdict.bounding_box()
    assert box is not None and box["y"] + box["height"] < 900  # in the first screenful


def test_the_script_filters_expands_and_follows_links(visit: Visit) -> None:
    page = visit.page
    assert visit.count("details.group[open]") == 1  # only the group with the overlaps
    page.fill("#group-filter", "group-002")
    shown = page.evaluate(
        "() => Array.from(document.querySelectorAll('details.group'))"
        ".filter(d => !d.hidden).map(d => d.dataset.name)"
    )
    assert shown == ["group-002"]
    page.click("#expand-all")
    assert visit.count("details.group[open]") == 2  # the hidden groups stay as they were
    page.fill("#group-filter", "")
    page.click("#collapse-all")
    assert visit.count("details.group[open]") == 0
    page.click("#groups table.overview a[href='#group-3']")
    page.wait_for_function("() => document.getElementById('group-3').open")
    assert visit.console == [] and visit.errors == []


def test_hostile_strings_run_nothing(browser: Browser, tmp_path: Path) -> None:
    tables = make_tables(groups=2, members=3, rebalances=1)
    for rows in tables.values():
        for i, row in enumerate(rows):
            for key in ("group", "member_id", "topic", "host", "reason", "error"):
                if key in row:
                    row[key] = f"{row[key]}{HOSTILE[i % len(HOSTILE)]}"
    tables["overlaps"] = [
        {
            "group": HOSTILE[1],
            "topic": HOSTILE[0],
            "partition": 1,
            "member_a": HOSTILE[2],
            "member_b": uid(0, 1),
            "host_a": HOSTILE[3],
            "host_b": HOSTILE[1],
            "from_ts": ts(1),
            "to_ts": ts(2),
            "seconds": 1.0,
            "skew_allowance_s": 0.1,
        }
    ]
    hostile = Visit(browser, render_html(tables, tmp_path / "hostile.html"))
    try:
        hostile.page.click("#expand-all")
        assert hostile.dialogs == []
        assert hostile.console == []  # a blocked injected script would show up here
        assert hostile.errors == []
        assert hostile.count("img, iframe") == 0
        assert HOSTILE[0] in hostile.page.locator("#safety table").inner_text()
    finally:
        hostile.page.close()


def test_screenshot_is_saved_as_an_artifact(visit: Visit, request: pytest.FixtureRequest) -> None:
    folder = Path(request.config.rootpath) / "artifacts" / "report-browser"
    folder.mkdir(parents=True, exist_ok=True)
    shot = folder / "report.png"
    visit.page.screenshot(path=str(shot), full_page=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    assert width == 1280 and height > 2000  # the whole page, open group included
    print(f"report screenshot: {shot}")
