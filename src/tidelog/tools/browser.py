"""The live page in a real browser: headless Chromium driven by selenium (Debian's `chromium`
and `chromium-driver`: `make chromium`; selenium is a dev dependency). `tidelog demo` takes
its picture of the page with it (`PageCamera`); tests/test_ui_live.py reads the page with it.

Rules of this file:
- Nothing here is needed to run tidelog: selenium is imported only when a browser starts,
  and `browser_missing` says what is missing without starting anything.
- `read_page` reads what the page shows, from its data attributes, in one script run in the
  page: one rendering of it, never half of one redraw and half of the next.
- `PageCamera` runs the browser in a thread of its own, so the caller's work never waits
  for it; every wait there has a named deadline, and the browser is quit on every path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from selenium import webdriver

CHROMIUM: Final = "/usr/bin/chromium"
CHROMEDRIVER: Final = "/usr/bin/chromedriver"
PAGE_LOAD_TIMEOUT_S: Final = 30
WINDOW: Final = (1280, 900)
CAMERA_TIMEOUT_S: Final = 30.0
"""The longest a camera waits for each of its cues (a page to open, a moment to take)."""
CAMERA_POLL_S: Final = 0.1

Page = dict[str, Any]

# What the page shows: nodes, and each partition's HWM, leader, replicas and groups.
_READ_PAGE_JS: Final = """
const read = (el, name) => el.getAttribute(name);
const page = {connection: document.getElementById("connection").dataset.state,
              nodes: {}, partitions: []};
for (const node of document.querySelectorAll("#nodes .node")) {
  page.nodes[read(node, "data-node")] = {state: read(node, "data-state"),
                                          text: node.textContent};
}
for (const section of document.querySelectorAll("section.partition")) {
  const hwmText = section.querySelector(".hwm").textContent;
  page.partitions.push({
    topic: read(section, "data-topic"), partition: Number(read(section, "data-partition")),
    hwm: Number(read(section, "data-hwm")), hwm_text: hwmText,
    leader: read(section, "data-leader"), epoch: read(section, "data-epoch"),
    isr: read(section, "data-isr"),
    replicas: [...section.querySelectorAll(".replica")].map((r) => ({
      node: Number(read(r, "data-node")), state: read(r, "data-state"),
      log_end_offset: read(r, "data-log-end-offset"), role: read(r, "data-role")})),
    groups: [...section.querySelectorAll(".group")].map((g) => ({
      group: read(g, "data-group"), committed: Number(read(g, "data-committed")),
      lag: Number(read(g, "data-lag")), text: g.textContent})),
  });
}
return JSON.stringify(page);
"""


def browser_missing(*, chromium: str = CHROMIUM, chromedriver: str = CHROMEDRIVER) -> str | None:
    """What is missing to start a headless Chromium (None when nothing is)."""
    missing = [name for name in (chromium, chromedriver) if not Path(name).is_file()]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium")
    return ", ".join(missing) or None


@contextmanager
def headless_chromium(*, window: tuple[int, int] = WINDOW) -> Iterator[webdriver.Chrome]:
    """A headless Chromium, its window `window` pixels, for the block. Its temporary files
    (its profile, the directories it leaves behind when it quits) go to a TMPDIR of its own,
    removed after it quits."""
    from selenium import webdriver  # noqa: PLC0415 - a dev dependency
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # in a container, as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={window[0]},{window[1]}",
    ):
        options.add_argument(argument)
    scratch = tempfile.mkdtemp(prefix="tidelog-chromium-")
    try:
        service = Service(CHROMEDRIVER, env={**os.environ, "TMPDIR": scratch})
        driver = webdriver.Chrome(options=options, service=service)
        try:
            driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def read_page(driver: webdriver.Chrome) -> Page:
    """{"connection": state, "nodes": {id: {"state", "text"}}, "partitions": [...]}."""
    page: Page = json.loads(driver.execute_script(_READ_PAGE_JS))
    return page


def partition_of(page: Page, topic: str, partition: int) -> dict[str, Any] | None:
    rows: list[dict[str, Any]] = page["partitions"]
    for row in rows:
        if row["topic"] == topic and row["partition"] == partition:
            return row
    return None


@dataclass(frozen=True)
class Shot:
    """What a camera did: the picture it saved (None: none, `note` says why), and whether
    the page showed the moment it waited for (else `note` says so)."""

    path: Path | None
    note: str = ""


class PageCamera:
    """A headless Chromium in a thread of its own that saves one picture of a live page.

    The caller cues it, never waiting for it: `start()` (the browser starts), `watch(url)`
    (the page opens and keeps its picture of the cluster up to date), `aim(moment)` (from
    now on the page is read every CAMERA_POLL_S until `moment(page)` holds, then saved),
    `finish()` (the picture is taken now if the moment has not come; what happened). A cue
    that does not come within CAMERA_TIMEOUT_S ends the camera without a picture."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._url = ""
        self._moment: Callable[[Page], bool] = lambda page: True
        self._watching, self._aimed, self._last_call = (threading.Event() for _ in range(3))
        self._shot = Shot(None, "the camera never ran")
        self._thread = threading.Thread(target=self._run, name="page-camera", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def watch(self, url: str) -> None:
        self._url = url
        self._watching.set()

    def aim(self, moment: Callable[[Page], bool]) -> None:
        self._moment = moment
        self._aimed.set()

    def finish(self) -> Shot:
        """Take the picture now if it was not taken yet, quit the browser; what happened."""
        self._last_call.set()
        if self._thread.ident is None:
            return self._shot
        self._thread.join(timeout=CAMERA_TIMEOUT_S)
        if self._thread.is_alive():
            return Shot(None, f"Chromium did not finish within {CAMERA_TIMEOUT_S:g} s")
        return self._shot

    def _run(self) -> None:
        from selenium.common.exceptions import WebDriverException  # noqa: PLC0415

        started, taken = False, False
        try:
            with headless_chromium() as driver:
                started = True
                self._shot = self._take(driver)
                taken = True
        except WebDriverException as error:
            if not taken:  # a browser that fails to quit keeps the picture it took
                said = first_line(error)
                self._shot = Shot(None, said if started else f"Chromium did not start: {said}")

    def _take(self, driver: webdriver.Chrome) -> Shot:
        if not self._cued(self._watching):
            return Shot(None, "no page to watch came")
        driver.get(self._url)
        if not self._cued(self._aimed):
            return Shot(None, "no moment to take came")
        deadline = time.monotonic() + CAMERA_TIMEOUT_S
        seen = self._moment(read_page(driver))
        while not seen and not self._last_call.is_set() and time.monotonic() < deadline:
            time.sleep(CAMERA_POLL_S)
            seen = self._moment(read_page(driver))
        if not driver.save_screenshot(str(self.out)):
            return Shot(None, f"Chromium could not write {self.out}")
        return Shot(self.out, "" if seen else "taken before the moment it waited for")

    def _cued(self, cue: threading.Event) -> bool:
        """Whether `cue` came before the last call and within CAMERA_TIMEOUT_S."""
        deadline = time.monotonic() + CAMERA_TIMEOUT_S
        while not cue.is_set() and not self._last_call.is_set() and time.monotonic() < deadline:
            cue.wait(CAMERA_POLL_S)
        return cue.is_set()


def first_line(error: Exception) -> str:
    """The first line of an error's message (selenium's run to many lines)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
