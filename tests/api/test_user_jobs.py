"""Jobs that run the user's script: the new fields of ``POST /v1/jobs``, the exact errors a
user sees for them, the job directory, and what agents are told."""

from __future__ import annotations

import json
import stat

import pytest

BASE = {"min_nodes": 1, "max_nodes": 2, "total_samples": 10}


def _errors(response):  # type: ignore[no-untyped-def]
    """(loc, msg) of every validation error."""
    return [(tuple(e["loc"]), e["msg"]) for e in response.json()["detail"]]


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"total_samples": 1.5},
            [
                (
                    ("body", "total_samples"),
                    "Input should be a valid integer, got a number with a fractional part",
                )
            ],
        ),
        (
            {"total_samples": 5e-324},
            [
                (
                    ("body", "total_samples"),
                    "Input should be a valid integer, got a number with a fractional part",
                )
            ],
        ),
        (
            {"total_samples": True},
            [
                (
                    ("body", "total_samples"),
                    "Value error, Input should be a valid integer, not a boolean",
                )
            ],
        ),
        (
            {"global_batch_size": 0},
            [(("body", "global_batch_size"), "Input should be greater than or equal to 1")],
        ),
        (
            {"command": ["x"] * 1001},
            [
                (
                    ("body", "command"),
                    "List should have at most 1000 items after validation, not 1001",
                )
            ],
        ),
        (
            {"command": ["train.py", "a" * 100_001]},
            [(("body", "command"), "Value error, argument 1 has 100001 bytes (at most 100000)")],
        ),
        (
            {"command": ["train.py", "a" * 60_000, "é" * 20_000]},
            [
                (
                    ("body", "command"),
                    "Value error, the arguments have 100008 bytes (at most 100000)",
                )
            ],
        ),
        (
            {"command": ["train.py", "--x=\x00"]},
            [
                (
                    ("body", "command"),
                    "Value error, a NUL character (U+0000) is not allowed (item 1, position 4)",
                )
            ],
        ),
        (
            {"command": [""]},
            [(("body", "command"), "Value error, the program (first argument) is empty")],
        ),
        (
            {"env": {"RANK": "3"}},
            [(("body", "env"), "Value error, RANK is set by the launcher and may not be given")],
        ),
        (
            {"env": {"OK": "1", "INTERSTICE_AGENT_TOKEN": "x"}},
            [
                (
                    ("body", "env"),
                    "Value error, INTERSTICE_AGENT_TOKEN is set by the launcher and may not be "
                    "given",
                )
            ],
        ),
        (
            {"env": {"TORCHELASTIC_RUN_ID": "x"}},
            [
                (
                    ("body", "env"),
                    "Value error, TORCHELASTIC_RUN_ID is set by the launcher and may not be given",
                )
            ],
        ),
        (
            {"env": {"1X": "a"}},
            [
                (
                    ("body", "env"),
                    "Value error, '1X' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
                )
            ],
        ),
        (
            {"env": {"A": "x" * 100_000}},
            [(("body", "env"), "Value error, names and values have 100001 bytes (at most 100000)")],
        ),
    ],
)
def test_bad_fields_are_422_naming_the_field(api, body, errors) -> None:  # type: ignore[no-untyped-def]
    r = api.call("POST", "/v1/jobs", "user", json=BASE | body)
    assert r.status_code == 422
    assert _errors(r) == errors


def test_nproc_per_node_is_a_positive_count_or_auto(api) -> None:
    r = api.call("POST", "/v1/jobs", "user", json=BASE | {"nproc_per_node": 0})
    assert r.status_code == 422
    assert {loc[:2] for loc, _ in _errors(r)} == {("body", "nproc_per_node")}
    r = api.call("POST", "/v1/jobs", "user", json=BASE | {"nproc_per_node": "many"})
    assert r.status_code == 422
    assert api.submit(nproc_per_node=4)["nproc_per_node"] == 4


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"min_nodes": 1, "max_nodes": 1, "total_samples": 9, "priority": NaN}', "priority"),
        (
            '{"min_nodes": 1, "max_nodes": 1, "total_samples": 9, "rescale_up_s": Infinity}',
            "rescale_up_s",
        ),
        ('{"min_nodes": 1, "max_nodes": 1, "total_samples": NaN}', "total_samples"),
    ],
)
def test_nan_and_infinity_are_422_not_500(api, raw, field) -> None:  # type: ignore[no-untyped-def]
    r = api.call(
        "POST", "/v1/jobs", "user", content=raw, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 422
    assert [loc for loc, _ in _errors(r)] == [("body", field)]


@pytest.mark.sqlite_only
def test_nan_in_a_heartbeat_is_422(api) -> None:
    agent = api.register("n1")
    raw = json.dumps({"job_id": "j-1", "loss": 1.0}).replace("1.0", "NaN")
    r = api.call(
        "POST",
        f"/v1/agents/{agent}/heartbeat",
        "agent",
        content=raw,
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 422
    assert _errors(r) == [(("body", "loss"), "Input should be a finite number")]


def test_a_model_outside_the_table_or_none_is_accepted(api) -> None:
    outside = api.submit(model="my-gpt", parallelism="spb")
    anonymous = api.submit(model=None)
    assert (outside["model"], outside["spb_depth"], outside["state"]) == ("my-gpt", 0, "queued")
    assert (anonymous["model"], anonymous["state"]) == (None, "queued")


def test_a_command_job_shows_its_fields_and_no_entrypoint(api) -> None:
    agent = api.register("n1", report_idle=True)
    fields = {
        "model": None,
        "command": ["train.py", "--out={job_dir}/x", "--n={total_samples}"],
        "workdir": "/home/me/project",
        # the one INTERSTICE_ name a job may set: its workers read it (elastic.watchdog)
        "env": {
            "OMP_NUM_THREADS": "4",
            "DATA": "/data/digits",
            "INTERSTICE_FIRST_STEP_DUMP_S": "9",
        },
        "nproc_per_node": 2,
        "global_batch_size": 64,
        "total_samples": 12_800,
        "min_nodes": 1,
        "max_nodes": 1,
    }
    job = api.submit(**fields)
    assert {k: job[k] for k in fields} == fields
    assert job["entrypoint"] is None
    (start,) = api.poll(agent)
    job_dir = str(api.settings.checkpoint_root.resolve() / job["job_id"])
    assert start["job"] == {
        "model": None,
        "parallelism": "dp",
        "global_batch_size": 64,
        "total_samples": 12_800,
        "min_nodes": 1,
        "max_nodes": 1,
        "entrypoint": None,
        "command": fields["command"],  # placeholders are the agent's to expand
        "workdir": "/home/me/project",
        "env": fields["env"],
        "nproc_per_node": 2,
        "job_dir": job_dir,
        "checkpoint_dir": f"{job_dir}/checkpoints",
        "owner": None,  # single-user mode: the job runs as the agent's account
    }
    assert api.job(job["job_id"])["entrypoint"] is None


def test_the_job_directory_is_created_0700_with_checkpoints_inside(api) -> None:
    root = api.settings.checkpoint_root.resolve()
    stale = root / "j-1"
    stale.mkdir(parents=True)
    (stale / "old.pt").write_text("another database's job j-1")
    job = api.submit()
    folder = root / job["job_id"]
    assert job["job_dir"] == str(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert (folder / "checkpoints").is_dir()
    assert list(folder.iterdir()) == [folder / "checkpoints"]  # the stale folder moved aside
    (aside,) = [p for p in root.iterdir() if p.name.startswith("j-1.old-")]
    assert (aside / "old.pt").read_text() == "another database's job j-1"


def test_a_job_directory_that_cannot_be_created_is_a_conflict(make_api, tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with make_api(checkpoint_root=blocker) as api:
        r = api.call("POST", "/v1/jobs", "user", json=BASE)
        assert r.status_code == 409
        assert r.json() == {
            "detail": f"cannot create the job directory {blocker.resolve()}/j-1: File exists "
            f"({blocker.resolve()})"
        }
        assert api.call("GET", "/v1/jobs", "admin").json()["count"] == 0
