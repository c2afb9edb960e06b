"""The dashboard at Summit's size in a real headless browser: 4,734 nodes (263 cabinets of
18) and 2,000 jobs of three users (tests/ui/summit_size.py).

The page's element count stays bounded (one canvas for the nodes, a page of each list),
the nodes are grouped by cabinet with a drill-down from the map, the cabinets' table and a
search down to one node, stale nodes are counted and explained, and the jobs come a page at
a time, searched by user, state and name on the service. Screenshots go to
``$INTERSTICE_UI_SCREENSHOTS`` (default ``<pytest basetemp>/ui-screenshots``). The
timings (first paint, refresh) are bench/dashboard.py's, not this test's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from pages import csp_refusals, login, show, texts, values, wait
from simulated import Served
from summit_size import NODES, PER_CABINET, Population, summit

pytestmark = pytest.mark.slow
pytest.importorskip("selenium", reason="selenium absent (pip install selenium): test skipped")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

ELEMENTS_MAX = 2500
"""Most elements a view may hold at this size: a tile (three elements) per node would be
over 14,000."""
CABINETS = math.ceil(NODES / PER_CABINET)


@pytest.fixture(scope="module")
def machine(
    browser, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, Population]]:
    with summit(tmp_path_factory.mktemp("summit")) as running:
        yield running


def elements(driver) -> int:  # type: ignore[no-untyped-def]
    return driver.execute_script("return document.getElementsByTagName('*').length")


def number(text: str) -> int:
    return int(text.replace(",", ""))


def where(driver, pager: str) -> str:  # type: ignore[no-untyped-def]
    (shown,) = texts(driver, f'[data-pager="{pager}"] .where')
    return shown


def detail(driver) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The drilled-down node's fields: {field: text}."""
    return driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#nodes-detail tr')]"
        ".map((r) => [r.dataset.field, r.querySelector('td').innerText]))"
    )


def test_nodes_grouped_by_cabinet_with_drill_down(browser, machine, screenshots: Path) -> None:  # type: ignore[no-untyped-def]
    served, population = machine
    driver = browser
    login(driver, served.url, served.tokens["admin"], "nodes")
    wait(
        driver,
        lambda d: (
            d.execute_script(
                "const c = document.querySelector('canvas.node-map');"
                "return c && [c.dataset.nodes, c.dataset.groups]"
            )
            == [str(NODES), str(CABINETS)]
        ),
        f"the map of {NODES} nodes in {CABINETS} cabinets",
    )
    counts = dict(zip(texts(driver, ".card span"), texts(driver, ".card b"), strict=True))
    assert number(counts["nodes"]) == NODES
    stale = number(next(v for k, v in counts.items() if k.startswith("stale")))
    assert stale == len(population.stale())
    assert where(driver, "groups") == f"1–12 of {CABINETS}"
    assert values(driver, "#nodes-groups tr[data-group]", "data-group")[:2] == [
        "a01",
        "a02",
    ]
    # the first cabinet is chosen: its 18 nodes as tiles
    assert values(driver, "#nodes-group .node", "data-node") == population.nodes[:18]
    assert elements(driver) <= ELEMENTS_MAX, elements(driver)
    driver.save_screenshot(str(screenshots / "dashboard-nodes-summit.png"))

    # the map: a click on its first cell drills down to a01n01
    canvas = driver.find_element(By.CSS_SELECTOR, "canvas.node-map")
    size = canvas.size
    ActionChains(driver).move_to_element_with_offset(
        canvas, 7 - size["width"] // 2, 19 - size["height"] // 2
    ).click().perform()
    wait(driver, lambda d: detail(d).get("node") == "a01n01", "a01n01 drilled down from the map")

    # the cabinets' table: another page, a cabinet, one of its nodes
    driver.find_element(By.CSS_SELECTOR, '[data-pager="groups"] .next').click()
    wait(driver, lambda d: where(d, "groups") == f"13–24 of {CABINETS}", "the second page")
    driver.find_element(By.CSS_SELECTOR, '#nodes-groups tr[data-group="a20"]').click()
    wait(
        driver,
        lambda d: values(d, "#nodes-group .node", "data-node")[:1] == ["a20n01"],
        "cabinet a20's tiles",
    )
    assert texts(driver, "#nodes-group h2") == ["Cabinet a20"]
    driver.find_element(By.CSS_SELECTOR, '#nodes-group .node[data-node="a20n07"]').click()
    wait(driver, lambda d: detail(d).get("node") == "a20n07", "a20n07's details")
    shown = detail(driver)
    assert shown["cabinet"] == "a20" and shown["agent"].endswith("(alive)")
    driver.set_window_size(1400, 1500)  # the map, the cabinet and the node in one picture
    driver.execute_script("document.getElementById('nodes-map').scrollIntoView()")
    driver.save_screenshot(str(screenshots / "dashboard-node-summit.png"))
    driver.set_window_size(1400, 1100)

    # the search: a stale node by its name, its details say why it is stale
    left = population.left[0]
    search = driver.find_element(By.ID, "nodes-search")
    search.send_keys(left)
    wait(driver, lambda d: detail(d).get("node") == left, f"{left} found by name")
    assert "its agent left" in detail(driver)["stale"]
    assert where(driver, "groups") == "1–1 of 1"
    search.clear()
    search.send_keys(population.passed[0])
    wait(driver, lambda d: "forecast end has passed" in detail(d).get("stale", ""), "passed end")
    assert elements(driver) <= ELEMENTS_MAX, elements(driver)


def _search(driver, **fields: str) -> None:  # type: ignore[no-untyped-def]
    for name in ("user", "name"):
        box = driver.find_element(By.CSS_SELECTOR, f'#job-search input[name="{name}"]')
        box.clear()
        box.send_keys(fields.get(name, ""))
    driver.execute_script(
        "const s = document.querySelector('#job-search select[name=state]');"
        "s.value = arguments[0];",
        fields.get("state", ""),
    )
    driver.find_element(By.CSS_SELECTOR, "#job-search button[type=submit]").click()


def test_jobs_paged_and_searched(browser, machine, screenshots: Path) -> None:  # type: ignore[no-untyped-def]
    served, population = machine
    driver = browser
    jobs = population.jobs
    show(driver, "jobs")
    total = f"of {len(jobs):,}"
    wait(driver, lambda d: where(d, "jobs") == f"1–25 {total}", "the first page of jobs")
    rows = values(driver, "table.jobs tr[data-job]", "data-job")
    assert rows == jobs[::-1][:25]  # newest first
    queued = served.ok("admin", "GET", "/v1/jobs?state=queued&limit=1")["count"]
    assert any(t.endswith(f"of {queued:,} queued jobs") for t in texts(driver, "#jobs-queue p"))
    assert len(texts(driver, "table.queue tbody tr")) == 10
    assert elements(driver) <= ELEMENTS_MAX, elements(driver)

    driver.find_element(By.CSS_SELECTOR, '[data-pager="jobs"] .next').click()
    wait(driver, lambda d: where(d, "jobs") == f"26–50 {total}", "the second page")
    assert values(driver, "table.jobs tr[data-job]", "data-job")[0] == jobs[-26]

    def expect(user: str | None = None, cancelled: bool = False, script: bool = False) -> list:
        return [
            j
            for j in reversed(jobs)
            if user in (None, population.users[j])
            and (not cancelled or j in population.cancelled)
            and (not script or j in population.scripts)
        ]

    for fields, wanted in (
        ({"user": "other"}, expect("other")),
        ({"user": "other", "state": "cancelled"}, expect("other", cancelled=True)),
        ({"name": "resnet"}, expect(script=True)),
        ({"name": "RESNET", "user": "admin"}, expect("admin", script=True)),
    ):
        _search(driver, **fields)
        wait(
            driver,
            lambda d, n=len(wanted): where(d, "jobs") == f"1–{min(25, n)} of {n:,}",
            f"{len(wanted)} jobs for {fields}",
        )
        shown = values(driver, "table.jobs tr[data-job]", "data-job")
        assert shown == wanted[:25], fields
        if "user" in fields:  # the table's second column
            users = {row.split("\t")[1] for row in texts(driver, "table.jobs tbody tr")}
            assert users == {fields["user"]}
    # the running jobs: their lanes in the Gantt
    _search(driver, state="running")
    wait(
        driver,
        lambda d: (states := texts(d, "table.jobs .badge")) and set(states) == {"running"},
        "the running jobs",
    )
    assert texts(driver, "#jobs-gantt .u-legend .u-label")
    driver.set_window_size(1400, 1500)  # the Gantt, the search and a page in one picture
    driver.execute_script("scrollTo(0, 0)")
    driver.save_screenshot(str(screenshots / "dashboard-jobs-summit.png"))
    driver.set_window_size(1400, 1100)


def test_agents_paged(browser, machine) -> None:  # type: ignore[no-untyped-def]
    served, population = machine
    driver = browser
    show(driver, "agents")
    registered = len(population.nodes) - len(population.no_agent)  # those that left included
    wait(driver, lambda d: len(texts(d, "tr[data-agent]")) == 50, "a page of 50 agents")
    assert where(driver, "agents") == f"1–50 of {registered:,}"
    driver.find_element(By.ID, "agents-search").send_keys("left")
    wait(
        driver,
        lambda d: where(d, "agents") == f"1–{len(population.left)} of {len(population.left)}",
        "the agents that left",
    )
    assert elements(driver) <= ELEMENTS_MAX, elements(driver)


def test_no_content_security_policy_violation(browser, machine) -> None:  # type: ignore[no-untyped-def]
    """Nothing the views above drew (the canvas, the tooltip's position, the pagers) was
    refused by the page's Content-Security-Policy."""
    assert csp_refusals(browser) == []
