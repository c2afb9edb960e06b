"""The dashboard in a real headless browser (Debian's chromium driven by selenium through
/usr/bin/chromedriver; nothing is downloaded) against a running ``interstice serve`` with
simulated agents, two jobs (a user's and an admin's), a reclaim and the solves they caused.

Each view must show the live data; an admin's weight change must land in the audit log; a
user's token must see only that user's jobs and "admins only" elsewhere. Screenshots of
every view go to ``$INTERSTICE_UI_SCREENSHOTS`` (default ``<pytest basetemp>/ui-screenshots``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from polling import wait_until
from simulated import Served, SimulatedAgents, serve, stop

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 60

pytestmark = pytest.mark.slow

webdriver = pytest.importorskip(
    "selenium.webdriver", reason="selenium absent (pip install selenium): browser test skipped"
)
if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
    pytest.skip(
        f"{CHROMIUM} or {CHROMEDRIVER} absent (apt-get install chromium chromium-driver): "
        "browser test skipped",
        allow_module_level=True,
    )
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(
        os.environ.get("INTERSTICE_UI_SCREENSHOTS")
        or tmp_path_factory.getbasetemp() / "ui-screenshots"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, dict[str, str]]]:
    """The service, agents on n1..n4 (n4 stays busy), the user's job on two nodes, the
    admin's on one, then a node reclaimed from the user's job, and a job of the admin's
    that waits in the queue (it needs three nodes)."""
    served = serve(tmp_path_factory.mktemp("dashboard"))
    agents = SimulatedAgents(served, ["n1", "n2", "n3", "n4"])
    try:
        agents.start()
        events = [
            {"event_id": f"idle-{n}", "node": n, "state": "idle", "at": _now(), "grace_s": 0}
            for n in ("n1", "n2", "n3")
        ]
        events.append(
            {"event_id": "busy-n4", "node": "n4", "state": "busy", "at": _now(), "grace_s": 0}
        )
        # n3's end is forecast: the scheduler wants it back in an hour
        wanted = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        events[2] = events[2] | {"until": wanted}
        served.ok("scheduler", "POST", "/v1/nodes/events", json={"events": events})
        body = {"model": "tinycnn", "min_nodes": 1, "total_samples": 10**7}
        mine = served.ok("user", "POST", "/v1/jobs", json=body | {"max_nodes": 2})["job_id"]
        theirs = served.ok("admin", "POST", "/v1/jobs", json=body | {"max_nodes": 1})["job_id"]
        _until(lambda: served.ok("user", "GET", f"/v1/jobs/{mine}")["samples_done"] > 0)
        held = served.ok("admin", "GET", "/v1/nodes")["data"]
        victim = next(n for n in held if n["holder"] == mine)["name"]
        reclaim = {"event_id": "reclaim", "node": victim, "state": "busy", "at": _now()}
        served.ok("scheduler", "POST", "/v1/nodes/events", json={"events": [reclaim]})
        _until(
            lambda: any(
                r["reason"] == "reclaim"
                for r in served.ok("user", "GET", f"/v1/jobs/{mine}")["rescales"]
            )
        )
        queued = served.ok(
            "admin", "POST", "/v1/jobs", json=body | {"min_nodes": 3, "max_nodes": 3}
        )
        yield served, {"mine": mine, "theirs": theirs, "victim": victim, "queued": queued["job_id"]}
        assert not agents.errors, agents.errors[:3]
    finally:
        agents.close()
        stop(served)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1100")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # for the CSP check
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _until(predicate) -> None:  # type: ignore[no-untyped-def]
    wait_until(predicate, WAIT_S, interval_s=0.2)


def _wait(driver, condition, what: str):  # type: ignore[no-untyped-def]
    """Wait for ``condition(driver)`` to be truthy; fail naming ``what`` and the page's
    status line."""
    try:
        return WebDriverWait(
            driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)
        ).until(condition)
    except Exception as exc:  # selenium's TimeoutException, with the page's state
        status = _texts(driver, "#status")
        raise AssertionError(f"{what}: not shown in {WAIT_S} s (status: {status!r})") from exc


def _texts(driver, css: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The text of every element matching ``css``, read in one go (the views re-render
    every 2 s, so elements found one call earlier may be gone)."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText)", css
    )


def _attributes(driver, css: str, name: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """``{element's attribute name: its class}`` of every element matching ``css``."""
    return driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll(arguments[0])]"
        ".map((e) => [e.getAttribute(arguments[1]), e.className]))",
        css,
        name,
    )


def _login(driver, url: str, token: str, view: str) -> None:  # type: ignore[no-untyped-def]
    driver.get(f"{url}/ui#{view}")
    _wait(driver, lambda d: d.find_element(By.ID, "token").is_displayed(), "token field")
    forget = driver.find_element(By.ID, "forget")
    forget.click()
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#token-form button[type=submit]").click()


def _show(driver, view: str) -> None:  # type: ignore[no-untyped-def]
    driver.find_element(By.CSS_SELECTOR, f'#tabs a[data-view="{view}"]').click()


def _updated(driver) -> bool:  # type: ignore[no-untyped-def]
    return _texts(driver, "#status")[0].startswith("updated")


def test_an_admin_sees_every_view_live(cluster, browser, screenshots: Path) -> None:  # type: ignore[no-untyped-def]
    served, jobs = cluster
    driver = browser
    driver.get(f"{served.url}/ui")
    assert driver.find_element(By.ID, "need-token").is_displayed()
    _login(driver, served.url, served.tokens["admin"], "nodes")

    # Nodes: counts, the grid (the reclaimed node busy), the chart with its legend
    _wait(
        driver,
        lambda d: (
            _texts(d, '.card[data-count="nodes"] b') == ["4"]
            and _texts(d, '.card[data-count="busy"] b') == ["2"]
        ),
        "node counts (4 nodes, 2 busy)",
    )
    grid = _attributes(driver, ".node-grid .node", "data-node")
    assert set(grid) == {"n1", "n2", "n3", "n4"} and "busy" in grid[jobs["victim"]]
    assert any("allocated" in c for c in grid.values())
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "[data-chart] .uplot canvas"), "chart")
    legend = " ".join(_texts(driver, "#view-nodes .u-legend .u-label"))
    for label in ("idle (nodes)", "busy (nodes)", "alive agents", f"{jobs['mine']} (nodes)"):
        assert label in legend
    assert "Nodes over time" in _texts(driver, "#view-nodes .u-title")
    # The scheduler's forecast: n3 alone in the "wanted back" table
    rows = _attributes(driver, "#nodes-wanted tr[data-node]", "data-node")
    assert list(rows) == ["n3"], rows
    driver.save_screenshot(str(screenshots / "1-nodes.png"))

    # Jobs: both jobs, the user's job's bar (progress and Gantt lane), the preemption mark
    _show(driver, "jobs")
    _wait(
        driver,
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{jobs["mine"]}"] .progress')
            and d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{jobs["theirs"]}"]')
        ),
        "both jobs' rows",
    )
    (row,) = _texts(driver, f'tr[data-job="{jobs["mine"]}"]')
    assert "running" in row and "tinycnn" in row
    assert any(t.startswith(jobs["queued"]) for t in _texts(driver, "table.queue tbody tr"))
    lanes = " ".join(_texts(driver, "#jobs-gantt .u-legend .u-label"))
    assert jobs["mine"] in lanes and "preemption" in lanes and "rescale" in lanes
    driver.save_screenshot(str(screenshots / "2-jobs.png"))

    # Harvest: the three windows with idle and harvested node-hours
    _show(driver, "harvest")
    _wait(
        driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-window]")) == 3, "windows"
    )
    assert "harvested (node-hours)" in " ".join(_texts(driver, "#view-harvest .u-label"))
    # per user (GET /v1/usage): the user's and the admin's jobs held nodes
    _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-user]")) == 2, "users")
    assert set(_attributes(driver, "tr[data-user]", "data-user")) == {"user", "admin"}
    driver.save_screenshot(str(screenshots / "3-harvest.png"))

    # Optimizer: a solve row; a weight changed through the form lands in the audit log; a
    # bad one is refused with the service's message
    _show(driver, "optimizer")
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-solve]"), "a solve row")
    _wait(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, "input[name=churn]").get_attribute("value"),
        "the weights",
    )
    churn = driver.find_element(By.CSS_SELECTOR, "input[name=churn]")
    churn.clear()
    churn.send_keys("2.5")
    driver.find_element(By.ID, "objective-save").click()
    _wait(
        driver,
        lambda d: any("churn: 0 → 2.5" in t for t in _texts(d, "tr[data-audit]")),
        "the audit row of the churn change",
    )
    assert served.ok("admin", "GET", "/v1/objective")["churn"] == 2.5
    limit = driver.find_element(By.CSS_SELECTOR, "input[name=time_limit_s]")
    limit.clear()
    limit.send_keys("0")
    driver.find_element(By.ID, "objective-save").click()
    _wait(
        driver,
        lambda d: "time_limit_s" in _texts(d, ".form-message")[0],
        "the refusal naming time_limit_s",
    )
    assert "refused" in _texts(driver, ".form-message")[0]
    driver.save_screenshot(str(screenshots / "4-optimizer.png"))
    driver.find_element(By.XPATH, "//form[@class='objective']//button[text()='Reset']").click()

    # Agents: four alive, the workers' world size reported
    _show(driver, "agents")
    _wait(
        driver,
        lambda d: len([t for t in _texts(d, "tr[data-agent]") if "alive" in t]) == 4,
        "four alive agents",
    )
    running = [t for t in _texts(driver, "tr[data-agent]") if jobs["theirs"] in t]
    assert running, "an agent reporting the admin's job"
    assert "running" in running[0]  # its workers' state
    driver.save_screenshot(str(screenshots / "5-agents.png"))


def test_a_user_sees_only_its_own_jobs(cluster, browser, screenshots: Path) -> None:  # type: ignore[no-untyped-def]
    served, jobs = cluster
    driver = browser
    _login(driver, served.url, served.tokens["user"], "jobs")
    _wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{jobs["mine"]}"]'),
        "own job",
    )
    _wait(driver, _updated, "a completed refresh")
    assert not driver.find_elements(By.CSS_SELECTOR, f'tr[data-job="{jobs["theirs"]}"]')
    assert jobs["theirs"] not in " ".join(_texts(driver, "#jobs-gantt .u-legend .u-label"))
    driver.save_screenshot(str(screenshots / "6-user-jobs.png"))
    for view in ("nodes", "harvest", "optimizer", "agents"):
        _show(driver, view)
        _wait(
            driver,
            lambda d, v=view: "admins only" in _texts(d, f"#view-{v}")[0],
            f"'admins only' on {view}",
        )
    driver.save_screenshot(str(screenshots / "7-user-agents.png"))
    print(f"screenshots in {screenshots}")


def test_no_content_security_policy_violation(cluster, browser) -> None:  # type: ignore[no-untyped-def]
    """The service sends the dashboard with a Content-Security-Policy that refuses inline
    scripts and styles: nothing the views above drew was refused (Chromium logs each refusal
    to the console). Runs last: the browser's log holds every view's."""
    refused = [
        entry["message"]
        for entry in browser.get_log("browser")
        if "Content Security Policy" in entry["message"]
    ]
    assert refused == []
