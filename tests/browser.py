"""A real browser for the UI tests: Debian's Chromium driven by Selenium through Debian's chromedriver.

Headless, sandbox off (the suite runs as root), no background networking (this
machine's network is closed), a fresh profile per browser. Nothing is
downloaded: the driver and the browser are the system's (``make install``
puts them there).

The Dagster UI re-renders often (live data, virtualized graphs), so every
lookup and click retries on stale or not-yet-rendered elements until a
deadline, and a failure says what it waited for.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    ElementNotInteractableException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
    "--disable-dev-shm-usage",
)
_TRANSIENT = (StaleElementReferenceException, NoSuchElementException, ElementClickInterceptedException, ElementNotInteractableException)
T = TypeVar("T")


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    width: float
    height: float


class Browser:
    """One Chromium with helpers that wait for the UI."""

    def __init__(self, base_url: str, width: int = 1600, height: int = 1000) -> None:
        self.base_url = base_url.rstrip("/")
        self.profile = tempfile.TemporaryDirectory(prefix="lineage-chromium-")
        options = Options()
        options.binary_location = CHROMIUM
        for flag in (*FLAGS, f"--user-data-dir={self.profile.name}", f"--window-size={width},{height}"):
            options.add_argument(flag)
        # an explicit driver path: Selenium Manager (which downloads drivers) is never asked
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            self.profile.cleanup()

    # -- waiting ---------------------------------------------------------------
    def wait(self, what: str, probe: Callable[[], T | None], timeout: float = 30, interval: float = 0.3) -> T:
        """``probe()`` until it returns something truthy (transient DOM errors retried)."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while True:
            try:
                value = probe()
                if value:
                    return value
            except _TRANSIENT as e:
                last = e
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {type(last).__name__ if last else 'no match'}) on {self.driver.current_url}")
            time.sleep(interval)

    def open(self, path: str) -> None:
        self.driver.get(self.base_url + path)

    def find(self, xpath: str, root: Any = None, timeout: float = 30) -> WebElement:
        return self.wait(f"element {xpath}", lambda: (root or self.driver).find_element(By.XPATH, xpath), timeout)

    def click(self, xpath: str, root: Any = None, timeout: float = 30) -> None:
        def go() -> bool:
            (root or self.driver).find_element(By.XPATH, xpath).click()
            return True

        self.wait(f"a click on {xpath}", go, timeout)

    def button(self, label: str, root: Any = None, timeout: float = 30) -> None:
        """Click the button whose visible text contains ``label``."""
        self.click(f".//button[contains(normalize-space(.), {_xpath_str(label)})]" if root is not None else f"//button[contains(normalize-space(.), {_xpath_str(label)})]", root, timeout)

    def open_dialog(self, label: str, timeout: float = 60) -> WebElement:
        """Click the button ``label`` until a dialog opens (a button clicked while the page loads does nothing)."""
        def probe() -> WebElement | None:
            dialogs = self.driver.find_elements(By.CSS_SELECTOR, ".bp5-dialog")
            if dialogs:
                return dialogs[-1]
            self.driver.find_element(By.XPATH, f"//button[contains(normalize-space(.), {_xpath_str(label)})]").click()
            time.sleep(1)
            return None

        return self.wait(f"a dialog from '{label}'", probe, timeout)

    def show_all_partitions(self, dialog: Callable[[], WebElement]) -> None:
        """A launcher opens on the last 90 days once its partitions have loaded (the banner comes late):
        wait for its date range, and switch it to all time."""
        def probe() -> bool:
            text = dialog().text
            if "All time" in text:
                return True
            if "Show all partitions" in text:
                dialog().find_element(By.XPATH, ".//*[normalize-space(text())='Show all partitions']").click()
                time.sleep(0.5)
            return False

        self.wait("all partitions in the launcher", probe, timeout=60)

    def text(self) -> str:
        return str(self.driver.find_element(By.TAG_NAME, "body").text)

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(path))
        return path

    def resize(self, width: int, height: int) -> None:
        self.driver.set_window_size(width, height)

    def local_storage(self, key: str, value: str) -> None:
        self.driver.execute_script("window.localStorage.setItem(arguments[0], arguments[1])", key, value)

    # -- the asset graph -------------------------------------------------------
    def asset_graph(self) -> tuple[dict[str, Box], set[tuple[str, str]]]:
        """The rendered global asset graph: node label → box, and edges as (upstream label, downstream label).

        Nodes are HTML in SVG foreignObjects; an edge is a path with an arrow
        whose first point leaves its upstream node's right side and whose last
        point enters its downstream node's left side (in the same coordinates).
        """
        nodes: dict[str, Box] = {}
        for fo in self.driver.find_elements(By.CSS_SELECTOR, "foreignObject"):
            names = fo.find_elements(By.CSS_SELECTOR, "[class*=AssetNode_assetName], [class*=AssetNode_minimalName]")
            if names:
                nodes[names[0].text.strip()] = Box(*(float(fo.get_attribute(a) or 0) for a in ("x", "y", "width", "height")))
        edges: set[tuple[str, str]] = set()
        for path in self.driver.find_elements(By.CSS_SELECTOR, "path[marker-end]"):
            points = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", path.get_attribute("d") or "")]
            if len(points) < 4:
                continue
            (x0, y0), (x1, y1) = points[:2], points[-2:]
            src = _node_at(nodes, x0, y0, side="right")
            dst = _node_at(nodes, x1, y1, side="left")
            if src and dst:
                edges.add((src, dst))
        return nodes, edges


def _node_at(nodes: dict[str, Box], x: float, y: float, side: str) -> str | None:
    best: tuple[float, str] | None = None
    for name, b in nodes.items():
        if not b.y - 2 <= y <= b.y + b.height + 2:
            continue
        edge_x = b.x + b.width if side == "right" else b.x
        d = abs(edge_x - x)
        if d <= 12 and (best is None or d < best[0]):
            best = (d, name)
    return best[1] if best else None


def _xpath_str(s: str) -> str:
    return f"'{s}'" if "'" not in s else 'concat("' + s.replace('"', '", \'"\', "') + '")'
