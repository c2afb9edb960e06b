"""The dashboard in a real headless browser (Debian's chromium driven by selenium through
/usr/bin/chromedriver; nothing is downloaded) against a running ``interstice serve`` with
simulated agents, two jobs (a user's and an admin's), a reclaim and the solves they caused.

Each view must show the live data; an admin's weight change must land in the audit log; a
user's token must see only that user's jobs and "admins only" elsewhere. Screenshots of
every view go to ``$INTERSTICE_UI_SCREENSHOTS`` (default ``<pytest basetemp>/ui-screenshots``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pages import WAIT_S, attributes, csp_refusals, login, show, texts, updated, wait
from polling import wait_until
from simulated import Served, SimulatedAgents, serve, stop

pytestmark = pytest.mark.slow
pytest.importorskip("selenium", reason="selenium absent (pip install selenium): test skipped")
from selenium.webdriver.common.by import By  # noqa: E402


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


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _until(predicate) -> None:  # type: ignore[no-untyped-def]
    wait_until(predicate, WAIT_S, interval_s=0.2)


def test_an_admin_sees_every_view_live(browser, cluster, screenshots: Path) -> None:  # type: ignore[no-untyped-def]
    served, jobs = cluster
    driver = browser
    driver.get(f"{served.url}/ui")
    assert driver.find_element(By.ID, "need-token").is_displayed()
    login(driver, served.url, served.tokens["admin"], "nodes")

    # Nodes: counts, the grid (the reclaimed node busy), the chart with its legend
    wait(
        driver,
        lambda d: (
            texts(d, '.card[data-count="nodes"] b') == ["4"]
            and texts(d, '.card[data-count="busy"] b') == ["2"]
        ),
        "node counts (4 nodes, 2 busy)",
    )
    grid = attributes(driver, ".node-grid .node", "data-node")
    assert set(grid) == {"n1", "n2", "n3", "n4"} and "busy" in grid[jobs["victim"]]
    assert any("allocated" in c for c in grid.values())
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "[data-chart] .uplot canvas"), "chart")
    legend = " ".join(texts(driver, "#view-nodes .u-legend .u-label"))
    for label in ("idle (nodes)", "busy (nodes)", "alive agents", f"{jobs['mine']} (nodes)"):
        assert label in legend
    assert "Nodes over time" in texts(driver, "#view-nodes .u-title")
    # The scheduler's forecast: n3 alone in the "wanted back" table
    rows = attributes(driver, "#nodes-wanted tr[data-node]", "data-node")
    assert list(rows) == ["n3"], rows
    driver.save_screenshot(str(screenshots / "1-nodes.png"))

    # Jobs: both jobs, the user's job's bar (progress and Gantt lane), the preemption mark
    show(driver, "jobs")
    wait(
        driver,
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{jobs["mine"]}"] .progress')
            and d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{jobs["theirs"]}"]')
        ),
        "both jobs' rows",
    )
    (row,) = texts(driver, f'tr[data-job="{jobs["mine"]}"]')
    assert "running" in row and "tinycnn" in row
    assert any(t.startswith(jobs["queued"]) for t in texts(driver, "table.queue tbody tr"))
    lanes = " ".join(texts(driver, "#jobs-gantt .u-legend .u-label"))
    assert jobs["mine"] in lanes and "preemption" in lanes and "rescale" in lanes
    driver.save_screenshot(str(screenshots / "2-jobs.png"))

    # Harvest: the three windows with idle and harvested node-hours
    show(driver, "harvest")
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-window]")) == 3, "windows")
    assert "harvested (node-hours)" in " ".join(texts(driver, "#view-harvest .u-label"))
    # per user (GET /v1/usage): the user's and the admin's jobs held nodes
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-user]")) == 2, "users")
    assert set(attributes(driver, "tr[data-user]", "data-user")) == {"user", "admin"}
    driver.save_screenshot(str(screenshots / "3-harvest.png"))

    # Optimizer: a solve row; a weight changed through the form lands in the audit log; a
    # bad one is refused with the service's message
    show(driver, "optimizer")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-solve]"), "a solve row")
    wait(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, "input[name=churn]").get_attribute("value"),
        "the weights",
    )
    churn = driver.find_element(By.CSS_SELECTOR, "input[name=churn]")
    churn.clear()
    churn.send_keys("2.5")
    driver.find_element(By.ID, "objective-save").click()
    wait(
        driver,
        lambda d: any("churn: 0 → 2.5" in t for t in texts(d, "tr[data-audit]")),
        "the audit row of the churn change",
    )
    assert served.ok("admin", "GET", "/v1/objective")["churn"] == 2.5
    limit = driver.find_element(By.CSS_SELECTOR, "input[name=time_limit_s]")
    limit.clear()
    limit.send_keys("0")
    driver.find_element(By.ID, "objective-save").click()
    wait(
        driver,
        lambda d: "time_limit_s" in texts(d, ".form-message")[0],
        "the refusal naming time_limit_s",
    )
    assert "refused" in texts(driver, ".form-message")[0]
    driver.save_screenshot(str(screenshots / "4-optimizer.png"))
    driver.find_element(By.XPATH, "//form[@class='objective']//button[text()='Reset']").click()

    # Agents: four alive, the workers' world size reported
    show(driver, "agents")
    wait(
        driver,
        lambda d: len([t for t in texts(d, "tr[data-agent]") if "alive" in t]) == 4,
        "four alive agents",
    )
    running = [t for t in texts(driver, "tr[data-agent]") if jobs["theirs"] in t]
    assert running, "an agent reporting the admin's job"
    assert "running" in running[0]  # its workers' state
    driver.save_screenshot(str(screenshots / "5-agents.png"))


def test_a_user_sees_only_its_own_jobs(browser, cluster, screenshots: Path) -> None:  # type: ignore[no-untyped-def]
    served, jobs = cluster
    driver = browser
    login(driver, served.url, served.tokens["user"], "jobs")
    wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{jobs["mine"]}"]'),
        "own job",
    )
    wait(driver, updated, "a completed refresh")
    assert not driver.find_elements(By.CSS_SELECTOR, f'tr[data-job="{jobs["theirs"]}"]')
    assert jobs["theirs"] not in " ".join(texts(driver, "#jobs-gantt .u-legend .u-label"))
    driver.save_screenshot(str(screenshots / "6-user-jobs.png"))
    for view in ("nodes", "harvest", "optimizer", "agents"):
        show(driver, view)
        wait(
            driver,
            lambda d, v=view: "admins only" in texts(d, f"#view-{v}")[0],
            f"'admins only' on {view}",
        )
    driver.save_screenshot(str(screenshots / "7-user-agents.png"))
    print(f"screenshots in {screenshots}")


def test_no_content_security_policy_violation(browser, cluster) -> None:  # type: ignore[no-untyped-def]
    """The service sends the dashboard with a Content-Security-Policy that refuses inline
    scripts and styles: nothing the views above drew was refused (Chromium logs each refusal
    to the console). Runs last: the browser's log holds every view's."""
    assert csp_refusals(browser) == []
