"""The job list's filters (``GET /v1/jobs?user=&name=&state=``), as the dashboard's search
uses them: each narrows the list and its ``count``, together they all must hold, and a
user's token never sees another user's jobs through them."""

from __future__ import annotations


def _ids(api, role: str, **params: object) -> tuple[list[str], int]:  # type: ignore[no-untyped-def]
    r = api.call("GET", "/v1/jobs", role, params=params)
    assert r.status_code == 200, r.text
    return [j["job_id"] for j in r.json()["data"]], r.json()["count"]


def test_filters_by_user_name_and_state(api) -> None:  # type: ignore[no-untyped-def]
    cnn = api.submit("user", model="tinycnn")["job_id"]
    script = api.submit("user", model=None, command=["python", "/home/u/Train_50%.py"])["job_id"]
    other = api.submit("other", model="tinycnn")["job_id"]
    cancelled = api.submit("admin", model="tinycnn")["job_id"]
    assert api.call("DELETE", f"/v1/jobs/{cancelled}", "admin").status_code == 200

    assert _ids(api, "admin", user="user-1") == ([script, cnn], 2)
    assert _ids(api, "admin", user="user-2") == ([other], 1)
    assert _ids(api, "admin", user="nobody") == ([], 0)
    # name: the model, the entrypoint or the command, case-insensitive; % and _ are literal
    assert _ids(api, "admin", name="TinyCNN") == ([cancelled, other, cnn], 3)
    assert _ids(api, "admin", name="train_50%") == ([script], 1)
    assert _ids(api, "admin", name="trai_") == ([], 0)
    assert _ids(api, "admin", name="tinycnn", state="cancelled") == ([cancelled], 1)
    assert _ids(api, "admin", name="tinycnn", user="user-1", limit=1) == ([cnn], 1)
    # a user's token: its own jobs only, whatever the filter names
    assert _ids(api, "user", user="user-2") == ([], 0)
    assert _ids(api, "other", name="tinycnn") == ([other], 1)
    shown = api.call("GET", f"/v1/jobs/{other}", "admin").json()
    assert shown["user"] == "user-2"


def test_an_empty_filter_or_a_nul_is_refused_naming_it(api) -> None:  # type: ignore[no-untyped-def]
    for param in ("user", "name"):
        for value in ("", "a\x00b"):  # PostgreSQL cannot compare text holding a NUL
            r = api.call("GET", "/v1/jobs", "admin", params={param: value})
            assert r.status_code == 422, (param, value)
            assert r.json()["detail"][0]["loc"] == ["query", param]
