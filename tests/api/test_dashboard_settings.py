"""The dashboard's settings: ``GET /ui/settings`` answers the node map's grouping pattern
(no token needed), and a pattern the service cannot use is refused at start, naming it."""

from __future__ import annotations

import re

import pytest
from interstice.api.settings import NODE_GROUP_PATTERN, Settings
from pydantic import ValidationError


@pytest.mark.sqlite_only
def test_the_page_reads_the_grouping_pattern(make_api) -> None:  # type: ignore[no-untyped-def]
    with make_api(node_group_pattern=r"^(r\d+)") as api:
        r = api.client.get("/ui/settings")
        assert r.status_code == 200
        assert r.json() == {"node_group_pattern": r"^(r\d+)"}
        assert "/ui/settings" not in api.client.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize(
    ("name", "cabinet"),
    [("a01n03", "a01"), ("h50n18", "h50"), ("r2c07n12", "r2c07"), ("n3", None), ("login1", None)],
)
def test_the_default_pattern_takes_summits_cabinet(name: str, cabinet: str | None) -> None:
    match = re.search(NODE_GROUP_PATTERN, name)
    assert (match.group(1) if match else None) == cabinet


@pytest.mark.parametrize(
    ("pattern", "says"),
    [("r\\d+", "needs a group"), ("(r\\d+", "not a regular expression")],
)
def test_a_pattern_without_a_group_is_refused(pattern: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says) as error:
        Settings(node_group_pattern=pattern)
    assert error.value.errors()[0]["loc"] == ("node_group_pattern",)
