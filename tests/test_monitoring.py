"""The monitoring files (interstice/monitoring/) against the service: every metric a query of
the Grafana dashboard names is one the service's GET /metrics exposes, the Grafana
provisioning finds the dashboard and the datasource the dashboard names, Prometheus scrapes
the path the service serves its metrics on, and compose.yaml's ``monitoring`` profile mounts
each file where the others expect it."""

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import interstice

pytest.importorskip("fastapi", reason="the service's dependencies are not installed")
yaml = pytest.importorskip(
    "yaml", reason="PyYAML absent (it comes with schemathesis, the dev extra)"
)

from fastapi.testclient import TestClient  # noqa: E402
from interstice.api.main import create_app  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MONITORING = Path(interstice.__file__).resolve().parent / "monitoring"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "interstice.json"
DATASOURCES = MONITORING / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
PROVIDERS = MONITORING / "grafana" / "provisioning" / "dashboards" / "interstice.yaml"
PROMETHEUS = MONITORING / "prometheus.yml"

SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}
"""The series names of a metric family by its type (a counter ``x`` is the series
``x_total``; a histogram ``x`` has no series ``x``); other types: the family's own name."""

PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "inf", "nan",
}  # fmt: skip
STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
NAME_MATCHER = re.compile(r"""__name__\s*=\s*("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')""")
IDENTIFIER = re.compile(r"(?<![\w.$:])[A-Za-z_:][\w:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: its identifiers other than functions,
    aggregations, keywords, label names (in ``{...}`` and ``by (...)``), ranges (``[5m]``,
    ``[$__rate_interval]``), strings and Grafana variables; plus ``{__name__="..."}``."""
    names = {m.group(1)[1:-1] for m in NAME_MATCHER.finditer(expr)}  # (names need no escape)
    expr = STRINGS.sub('""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    for match in IDENTIFIER.finditer(expr):
        word = match.group()
        if word.lower() in PROMQL_WORDS or expr[match.end() :].lstrip().startswith("("):
            continue  # a keyword, or a function or aggregation
        names.add(word)
    return names


def exposed_series(text: str) -> set[str]:
    """Every series name the Prometheus text ``text`` declares (``# TYPE``, with or without
    samples) or holds."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in SERIES_SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def expressions(node: Any) -> Iterator[str]:
    """Every ``expr`` of a dashboard: its panels' targets, nested rows and variables alike."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def compose_service(name: str) -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"][name]


def mounts(service: dict) -> dict[str, Path]:
    """A compose service's bind mounts: container path -> the repository's file or folder."""
    found = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            found[target] = (ROOT / source).resolve()
    return found


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A live app on SQLite: the response to Prometheus's scrape (after a few requests, so
    that the request latency histogram has samples) and the path scraped."""
    folder = tmp_path_factory.mktemp("service")
    with pytest.MonkeyPatch.context() as env:  # the settings as `interstice serve` reads them
        env.setenv("INTERSTICE_DB_URL", f"sqlite:///{folder / 'interstice.db'}")
        env.setenv("INTERSTICE_CHECKPOINT_ROOT", str(folder / "checkpoints"))
        app = create_app()
    metrics_path = yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"][0].get(
        "metrics_path", "/metrics"
    )
    with TestClient(app) as client:
        for path in ("/healthz", "/readyz", "/v1/nodes"):  # /v1/nodes: 401 without a token
            client.get(path)
        client.get(metrics_path)
        response = client.get(metrics_path)  # holds the latency of the first scrape
    return {"path": metrics_path, "response": response}


def test_every_dashboard_query_names_a_metric_the_service_exposes(scrape: dict) -> None:
    exposed = exposed_series(scrape["response"].text)
    queries = list(expressions(dashboard()))
    assert len(queries) >= 10
    unknown = {}
    for expr in queries:
        names = metric_names(expr)
        assert names, f"no metric found in {expr!r}"
        if names - exposed:
            unknown[expr] = sorted(names - exposed)
    assert not unknown, f"metrics GET /metrics does not expose: {unknown}"


def test_the_labelled_metrics_are_declared_before_any_sample(scrape: dict) -> None:
    """Rescales and solver statuses have no sample until a rescale or a solve: their families
    are still declared (``# TYPE``), which is what the check above relies on."""
    exposed = exposed_series(scrape["response"].text)
    assert {"interstice_rescales_total", "interstice_solver_status_total"} <= exposed
    assert "interstice_request_seconds_bucket" in exposed


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("max(interstice_idle_nodes)", {"interstice_idle_nodes"}),
        (
            "histogram_quantile(0.99, sum by (le, route) (rate(interstice_request_seconds_bucket"
            '{route=~"/v1/agents.*", route!~".*/(poll|commands)"}[$__rate_interval])))',
            {"interstice_request_seconds_bucket"},
        ),
        (
            "sum(rate(a_sum[5m])) / ignoring (x) sum(rate(a_count[5m] offset 1h))"
            " * 3600 > bool 1e3",
            {"a_sum", "a_count"},
        ),
        (
            'max by (state) (interstice_jobs{state=~"queued|running"}) or vector(0)',
            {"interstice_jobs"},
        ),
        ('count({__name__="up"})', {"up"}),
    ],
)
def test_metric_names_of_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_an_unknown_metric_is_caught(scrape: dict) -> None:
    """A counter named without ``_total``, or a name the service never had, is reported."""
    exposed = exposed_series(scrape["response"].text)
    for wrong in ("interstice_rescales", "interstice_solve_seconds", "interstice_reclaimed_nodes"):
        assert metric_names(f"sum(rate({wrong}[5m]))") - exposed == {wrong}


GUIDES = ROOT / "docs" / "admin-guide"
WATCH = re.compile(r"\b[Ww]atch\b(.*?)(?:\.\s|\.$|$)", re.DOTALL)


def watched_metrics(text: str, exposed: set[str]) -> set[str]:
    """The metrics of ``exposed`` that a sentence of ``text`` tells admins to watch (from the
    word "watch" to the end of its sentence)."""
    named = set()
    for sentence in WATCH.findall(text):
        named |= set(re.findall(r"`(interstice_\w+)", sentence))
    return named & exposed


def test_every_metric_the_guides_say_to_watch_has_a_panel(scrape: dict) -> None:
    exposed = exposed_series(scrape["response"].text)
    charted = set().union(*(metric_names(e) for e in expressions(dashboard())))
    watched = {
        guide.name: watched_metrics(guide.read_text(), exposed)
        for guide in sorted(GUIDES.glob("*.md"))
    }
    assert {"interstice_forecast_coverage", "interstice_forecasts_used"} <= watched["slurm.md"]
    assert "interstice_nodes_quarantined" in watched["agents.md"]
    missing = {name: sorted(m - charted) for name, m in watched.items() if m - charted}
    assert not missing, f"metrics the guides say to watch with no dashboard panel: {missing}"


def test_watched_metrics_are_read_to_the_end_of_the_sentence() -> None:
    text = "Watch `interstice_a` and\n`interstice_b` (see x.md). Then `interstice_c`."
    assert watched_metrics(text, {"interstice_a", "interstice_b", "interstice_c"}) == {
        "interstice_a",
        "interstice_b",
    }


def test_the_dashboard_is_provisionable() -> None:
    board = dashboard()
    datasource = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]
    assert board["uid"] and board["title"]
    panels = [p for p in board["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all(t["datasource"]["uid"] == datasource["uid"] for t in panel["targets"])
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24


def test_grafana_provisioning_points_at_prometheus_and_the_dashboard() -> None:
    datasources = yaml.safe_load(DATASOURCES.read_text())
    providers = yaml.safe_load(PROVIDERS.read_text())
    assert datasources["apiVersion"] == providers["apiVersion"] == 1
    (datasource,) = datasources["datasources"]
    assert datasource["type"] == "prometheus"
    url = urlsplit(datasource["url"])
    assert url.hostname == "prometheus" and url.port == 9090
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    grafana = compose_service("grafana")
    mounted = mounts(grafana)
    # the provider's folder is the packaged dashboards folder, which holds the dashboard
    assert mounted[provider["options"]["path"]] == DASHBOARD.parent.resolve()
    assert DASHBOARD.name in {p.name for p in DASHBOARD.parent.glob("*.json")}
    home = Path(grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert mounted[str(home.parent)] / home.name == DASHBOARD.resolve()
    # Grafana reads its provisioning from these two folders
    assert mounted["/etc/grafana/provisioning/datasources"] == DATASOURCES.parent.resolve()
    assert mounted["/etc/grafana/provisioning/dashboards"] == PROVIDERS.parent.resolve()


def test_prometheus_scrapes_the_service_where_it_serves_metrics(scrape: dict) -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    (job,) = config["scrape_configs"]
    path = job.get("metrics_path", "/metrics")
    assert path == scrape["path"]
    response = scrape["response"]
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    # the service served the previous scrape on that route itself (not a catch-all)
    families = text_string_to_metric_families(response.text)
    (latency,) = [f for f in families if f.name == "interstice_request_seconds"]
    assert {(s.labels["route"], s.labels["status"]) for s in latency.samples} >= {(path, "200")}
    (target,) = [t for c in job["static_configs"] for t in c["targets"]]
    host, port = target.split(":")
    service = compose_service(host)
    assert any(p.endswith(f":{port}") for p in service["ports"])
    prometheus = compose_service("prometheus")
    assert mounts(prometheus)["/etc/prometheus/prometheus.yml"] == PROMETHEUS.resolve()
    assert compose_service("grafana")["profiles"] == prometheus["profiles"] == ["monitoring"]
