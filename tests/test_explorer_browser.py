"""The lineage explorer in Chromium: ``lineage-defs docs serve`` on the example, scripts and dbt models together.

Search a column, click it: the columns the page highlights upstream and
downstream — in its graph (Cytoscape's node classes) and in the lists under it
— are exactly what ``lineage-defs impact --json`` answers (asked in the test,
for the same folder). A column of a dbt model is clicked in the graph itself
(a real click on the canvas at the node's drawn position). With
UPDATE_SCREENSHOTS=1 the README's screenshot (docs/explorer.png) is taken again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from browser import Browser
from conftest import free_port, with_example_parse

pytestmark = [pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pipelines"
CLI = Path(sys.executable).parent / "lineage-defs"
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("explorer-browser")
    env = {**os.environ, "LINEAGE_STATE_DIR": str(with_example_parse(tmp / "state")), "LINEAGE_UI_URL": "http://127.0.0.1:3999"}
    env.pop("DAGSTER_HOME", None)
    port = free_port()
    proc = subprocess.Popen(
        [str(CLI), "docs", "serve", "--port", str(port), "--folder", str(EXAMPLE), "--dir", str(tmp / "site")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # after the build: the example's dbt project parsed
        assert f"127.0.0.1:{port}" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield f"http://127.0.0.1:{port}", env
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def browser(served: tuple[str, dict[str, str]]) -> Iterator[Browser]:
    b = Browser(served[0])
    try:
        yield b
    finally:
        b.close()


def impact(env: dict[str, str], spec: str, upstream: bool) -> set[str]:
    cmd = [str(CLI), "impact", spec, "--json", "--folder", str(EXAMPLE), *(["--upstream"] if upstream else [])]
    answer = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=300).stdout)
    return {f"{c['asset']}.{c['column']}" if c["column"] is not None else c["asset"] for c in answer["columns"]}


def highlighted(b: Browser, spec: str) -> dict[str, set[str]]:
    """What the page shows for the selected column: the graph's classes and the lists' items."""
    b.wait(f"the lineage of {spec}", lambda: b.driver.execute_script("return document.body.dataset.selection") == spec, timeout=60)
    js = "return cy.nodes(arguments[0]).map(n => n.data('node'))"
    return {
        "graph up": set(b.driver.execute_script(js, ".up")),
        "graph down": set(b.driver.execute_script(js, ".down")),
        "graph selected": set(b.driver.execute_script(js, ".sel")),
        "list up": {li.get_attribute("data-node") for li in b.driver.find_elements(By.CSS_SELECTOR, "#upstream > li")},
        "list down": {li.get_attribute("data-node") for li in b.driver.find_elements(By.CSS_SELECTOR, "#downstream > li")},
    }


def assert_is_impact(shown: dict[str, set[str]], env: dict[str, str], spec: str) -> None:
    up, down = impact(env, spec, upstream=True), impact(env, spec, upstream=False)
    assert up and down, (spec, "the example should give this column both directions")
    assert shown["graph selected"] == {spec}
    assert shown["graph up"] == up and shown["list up"] == up
    assert shown["graph down"] == down and shown["list down"] == down


def test_search_a_column_click_it_and_the_highlight_is_impacts_answer(browser: Browser, served: tuple[str, dict[str, str]]) -> None:
    b, env = browser, served[1]
    spec = "ducklake://main/orders.amount_eur"
    b.open("/")
    box = b.find("//input[@id='search']")
    box.send_keys("orders.amount_eur")
    b.click(f"//ul[@id='results']/li[@data-node='{spec}']")
    shown = highlighted(b, spec)
    assert_is_impact(shown, env, spec)
    assert any(n.startswith("dbt://") for n in shown["graph down"])  # across scripts and dbt
    # the page is the asset's: its details and its link into the Dagster UI
    assert b.find("//code[@id='asset-uri']").text == "ducklake://main/orders"
    assert b.find("//a[@id='dagster-link']").get_attribute("href") == "http://127.0.0.1:3999/assets/ducklake/main/orders"
    assert "team:data-eng" in b.text() and "daily from 2025-01-01" in b.text()


def test_click_a_dbt_models_column_in_the_graph(browser: Browser, served: tuple[str, dict[str, str]]) -> None:
    b, env = browser, served[1]
    model = "dbt://warehouse/main/store_daily"
    spec = f"{model}.revenue_eur"
    b.open("/")
    b.find("//input[@id='search']").send_keys("store_daily")
    b.click(f"//ul[@id='results']/li[@data-uri='{model}' and @data-node='']")
    b.wait("the model's graph", lambda: b.driver.execute_script("return document.body.dataset.state === 'ready' && !!window.cy && cy.getElementById(arguments[0]).length > 0", f"c:{spec}"))
    time.sleep(0.5)  # the graph's fit settles
    x, y = b.driver.execute_script("const p = cy.getElementById(arguments[0]).renderedPosition(); return [p.x, p.y]", f"c:{spec}")
    canvas = b.find("//div[@id='graph']")
    ActionChains(b.driver).move_to_element_with_offset(canvas, int(x - canvas.size["width"] / 2), int(y - canvas.size["height"] / 2)).click().perform()
    shown = highlighted(b, spec)
    assert_is_impact(shown, env, spec)
    assert any(not n.startswith("dbt://") for n in shown["graph up"])  # its upstream crosses into the scripts
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        shot = "dbt://warehouse/main/stg_orders.amount_eur"  # a dbt model between scripts
        b.open(f"/#/asset/{quote('dbt://warehouse/main/stg_orders', safe='')}/column/{quote(shot, safe='')}")
        highlighted(b, shot)
        b.driver.execute_script("document.getElementById('search').value = arguments[0]", "stg_orders.amount_eur")
        time.sleep(0.5)
        b.screenshot(DOCS / "explorer.png")
