"""The dashboard's speed at Summit's size, in Debian's headless chromium: for the Nodes, Jobs
and Agents views, the first paint (from the page's navigation to the frame that shows the
view's first completed refresh) and each later refresh (every 2 s, from its start to the
frame that shows it), read from the page's own performance measures (``app.js``), and the
page's element count. The same page on a small machine (16 nodes, 10 jobs) in the same
process is the baseline: each line has the ratio to it.

The service is filled as the browser test fills it (tests/ui/summit_size.py: 4,734 nodes
with agents, 2,000 jobs of three users). Goals: first paint ≤ 2 s, refresh ≤ 1 s.

    python bench/dashboard.py [--nodes 4734] [--jobs 2000] [--refreshes 8]

Prints one JSON line per size and view, then one per view with the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "ui"), str(TESTS)]  # the browser test's service and browser

from pages import chrome, login, wait  # noqa: E402
from summit_size import JOBS, NODES, summit  # noqa: E402

VIEWS = ("nodes", "jobs", "agents")
BASELINE = (16, 10)
"""Nodes and jobs of the baseline machine."""
FIRST_PAINT_GOAL_MS = 2000
REFRESH_GOAL_MS = 1000

MEASURES = (
    "return performance.getEntriesByName('interstice:refresh:' + arguments[0])"
    ".map((m) => [m.startTime, m.duration])"
)


def measure(driver: Any, url: str, view: str, refreshes: int) -> dict[str, Any]:
    """Open ``view`` afresh (the token already in the tab) and time its first paint and
    ``refreshes`` refreshes after it, milliseconds."""
    driver.get("about:blank")
    driver.get(f"{url}/ui#{view}")
    entries = wait(
        driver,
        lambda d: (found := d.execute_script(MEASURES, view)) and len(found) > refreshes and found,
        f"{refreshes + 1} refreshes of {view}",
        timeout_s=60 + 5 * refreshes,
    )
    start, duration = entries[0]
    later = [d for _, d in entries[1 : refreshes + 1]]
    return {
        "first_paint_ms": round(start + duration, 1),
        "refresh_median_ms": round(statistics.median(later), 1),
        "refresh_max_ms": round(max(later), 1),
        "elements": driver.execute_script("return document.getElementsByTagName('*').length"),
    }


def run(nodes: int, jobs: int, refreshes: int) -> dict[str, dict[str, Any]]:
    """Each view's figures on a service of ``nodes`` nodes and ``jobs`` jobs."""
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        with summit(Path(folder), nodes, jobs) as (served, _):
            filled_s = time.monotonic() - started
            driver = chrome()
            try:
                login(driver, served.url, served.tokens["admin"], "nodes")
                measure(driver, served.url, "nodes", 1)  # warm-up: the service's first answers
                figures = {view: measure(driver, served.url, view, refreshes) for view in VIEWS}
            finally:
                driver.quit()
    for view, row in figures.items():
        row |= {"bench": "dashboard", "view": view, "nodes": nodes, "jobs": jobs}
        row["filled_s"] = round(filled_s, 1)
        print(json.dumps(row), flush=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--refreshes", type=int, default=8)
    args = parser.parse_args(argv)
    base = run(*BASELINE, args.refreshes)
    big = run(args.nodes, args.jobs, args.refreshes)
    for view in VIEWS:
        row = {"bench": "dashboard-ratio", "view": view, "nodes": args.nodes, "jobs": args.jobs}
        for key in ("first_paint_ms", "refresh_median_ms", "refresh_max_ms", "elements"):
            row[key.removesuffix("_ms") + "_ratio"] = round(big[view][key] / base[view][key], 2)
        row["first_paint_goal_met"] = big[view]["first_paint_ms"] <= FIRST_PAINT_GOAL_MS
        row["refresh_goal_met"] = big[view]["refresh_max_ms"] <= REFRESH_GOAL_MS
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
