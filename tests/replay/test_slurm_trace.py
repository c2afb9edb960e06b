"""``interstice trace from-slurm``: sacct and sacctmgr text to a node-state trace, worked by
hand to the second; hostile lines skipped and counted; unusable input is one line and exit 2;
and ``interstice replay`` on a converted trace."""

import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from interstice.agents.slurm.accounting import AccountingFormatError, parse_events, parse_sacct
from interstice.agents.slurm.env import NodeListError, parse_node_list
from interstice.replay.slurm_trace import convert
from interstice.replay.trace import load_trace
from typer.testing import CliRunner

from interstice import data
from interstice.cli import app

runner = CliRunner()

SACCT = """\
JobID|NodeList|Start|End|State|Partition
200|n[01-02]|2026-11-01T09:00:00|2026-11-01T10:15:30|COMPLETED|batch
201|n02|2026-11-01T10:10:00|2026-11-01T10:40:07|CANCELLED by 0|batch
201.batch|n02|2026-11-01T10:10:00|2026-11-01T10:40:07|CANCELLED|
201.extern|n02|2026-11-01T10:10:00|2026-11-01T10:40:07|COMPLETED|
202|None assigned|Unknown|Unknown|PENDING|batch
203|None assigned|2026-11-01T10:05:00|2026-11-01T10:05:00|CANCELLED by 1000|batch
204|n[03-04]|2026-11-01T11:30:00|Unknown|RUNNING|batch
205|n01|2026-11-01T10:15:30|2026-11-01T10:20:00|FAILED|batch
206|n04|2026-11-01T10:00:00|2026-11-01T11:00:00|PREEMPTED|scavenger
207|gpu1|2026-11-01T10:00:00|2026-11-01T11:00:00|COMPLETED|gpu
208|n03|2026-11-01T12:00:00|2026-11-01T12:30:00|COMPLETED|batch
209|n03|2026-11-01T08:00:00|2026-11-01T09:59:59|COMPLETED|batch
"""
"""Window 10:00-12:00 on n[01-04]. n01: 200 then 205 back to back (busy to 10:20:00); n02:
200 and 201 overlap (busy to 10:40:07); n03: 204 from 11:30 (running: to the end), 208 and
209 outside the window; n04: 204 from 11:30, 206 is a scavenger placeholder. 207 is on a node
not listed; 202 and 203 never started; two steps of 201."""

EVENTS = """\
Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User
test||2026-11-01T09:00:00|Unknown||Cluster Registered TRES|
test|n03|2026-11-01T10:50:00|2026-11-01T11:40:00|DOWN|fan|root(0)
"""
"""n03 down 10:50-11:40, overlapping job 204 from 11:30: busy in the trace from 10:50."""

EXPECTED = """\
timestamp,node,state
2026-11-01T10:00:00,n01,busy
2026-11-01T10:00:00,n02,busy
2026-11-01T10:00:00,n03,idle
2026-11-01T10:00:00,n04,idle
2026-11-01T10:20:00,n01,idle
2026-11-01T10:40:07,n02,idle
2026-11-01T10:50:00,n03,busy
2026-11-01T11:30:00,n04,busy
2026-11-01T12:00:00,n01,idle
"""
BUSY_S = 1200 + 2407 + 1200 + 1800  # n03: 11:40-12:00 busy and not down
DOWN_S = 3000  # n03 10:50-11:40
IDLE_S = 4 * 7200 - BUSY_S - DOWN_S

WINDOW = ["--start", "2026-11-01T10:00:00", "--end", "2026-11-01T12:00:00"]


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    # No agent.conf default: the tests name the partitions to exclude.
    monkeypatch.setenv("INTERSTICE_AGENT_CONF", str(tmp_path / "absent.conf"))
    paths = {"sacct": tmp_path / "jobs.txt", "events": tmp_path / "events.txt"}
    paths["sacct"].write_text(SACCT)
    paths["events"].write_text(EVENTS)
    return paths


def from_slurm(files: dict[str, Path], out: Path, *extra: str, tz: str = "UTC"):
    return runner.invoke(
        app,
        [
            "trace",
            "from-slurm",
            str(files["sacct"]),
            "--nodes",
            "n[01-04]",
            *WINDOW,
            "--out",
            str(out),
            "--tz",
            tz,
            *extra,
        ],
    )


def test_hand_worked_trace_to_the_second(files: dict[str, Path], tmp_path: Path):
    out = tmp_path / "mine.csv.gz"
    result = from_slurm(
        files, out, "--exclude-partition", "scavenger", "--events", str(files["events"])
    )
    assert result.exit_code == 0, result.stderr
    assert gzip.decompress(out.read_bytes()).decode() == EXPECTED
    assert "2 job steps" in result.stderr and "--allocations" in result.stderr
    assert "not in --nodes" in result.stderr and "gpu1" in result.stderr
    assert "jobs: 7 used, 1 in excluded partitions (scavenger), 2 never started" in (result.stdout)
    assert f"busy {BUSY_S / 3600:.1f} node-h" in result.stdout
    trace = load_trace(out)
    assert list(trace.node_names) == ["n01", "n02", "n03", "n04"]
    assert trace.duration_s == 7200


def test_node_seconds_split_busy_down_idle():
    jobs, spells = parse_sacct(SACCT, UTC), parse_events(EVENTS, UTC)
    kept = [job for job in jobs.allocations if job.partition != "scavenger"]
    conversion = convert(
        ["n01", "n02", "n03", "n04"],
        datetime(2026, 11, 1, 10, tzinfo=UTC),
        datetime(2026, 11, 1, 12, tzinfo=UTC),
        [(node, job.start, job.end) for job in kept for node in job.nodes],
        [(node, s.start, s.end) for s in spells.allocations for node in s.nodes],
    )
    assert conversion.text == EXPECTED
    assert (conversion.busy_node_s, conversion.down_node_s) == (BUSY_S, DOWN_S)
    assert conversion.idle_node_s == IDLE_S
    assert jobs.skipped == {"job step": 2, "never started": 2}
    assert spells.skipped == {"cluster event": 1}
    assert conversion.outside_nodes == {"gpu1"}


def test_placeholders_count_busy_without_exclusion(files: dict[str, Path], tmp_path: Path):
    out = tmp_path / "mine.csv"
    result = from_slurm(files, out, "--exclude-partition", "")
    assert result.exit_code == 0, result.stderr
    lines = out.read_text().splitlines()  # plain CSV by its extension
    assert {"2026-11-01T10:00:00,n04,busy", "2026-11-01T11:00:00,n04,idle"} <= set(lines)
    assert "jobs: 8 used, 0 in excluded partitions (none)" in result.stdout


def test_agent_conf_partition_is_the_default_exclusion(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    conf = tmp_path / "agent.conf"
    conf.write_text("server_url=http://127.0.0.1:1\nagent_token=t\npartition=scavenger\n")
    conf.chmod(0o640)
    monkeypatch.setenv("INTERSTICE_AGENT_CONF", str(conf))
    result = from_slurm(files, tmp_path / "mine.csv")
    assert result.exit_code == 0, result.stderr
    assert "1 in excluded partitions (scavenger)" in result.stdout
    assert "n04,busy" not in (tmp_path / "mine.csv").read_text().split("11:30:00")[0]


def test_times_read_in_tz_and_written_in_utc(files: dict[str, Path], tmp_path: Path):
    # Paris is UTC+1 on 2026-11-01 (summer time ended on 25 October): every row 1 h earlier.
    out = tmp_path / "paris.csv"
    result = from_slurm(
        files,
        out,
        "--exclude-partition",
        "scavenger",
        "--events",
        str(files["events"]),
        tz="Europe/Paris",
    )
    assert result.exit_code == 0, result.stderr
    shifted = [EXPECTED.splitlines()[0]]
    for line in EXPECTED.splitlines()[1:]:
        stamp, rest = line.split(",", 1)
        earlier = datetime.fromisoformat(stamp) - timedelta(hours=1)
        shifted.append(f"{earlier.isoformat()},{rest}")
    assert out.read_text().splitlines() == shifted


def test_nodes_from_a_sinfo_file(files: dict[str, Path], tmp_path: Path):
    # `sinfo -h -o %N`: one hostlist per partition; nodes in two partitions count once.
    nodes = tmp_path / "nodes.txt"
    nodes.write_text("# sinfo -h -o %N\nn[01-03]\nn[03-04]\n")
    out = tmp_path / "mine.csv"
    result = runner.invoke(
        app,
        ["trace", "from-slurm", str(files["sacct"]), "--nodes", f"@{nodes}", *WINDOW]
        + ["--out", str(out), "--tz", "UTC", "--exclude-partition", "scavenger"],
    )
    assert result.exit_code == 0, result.stderr
    assert "4 nodes, 7200 s" in result.stdout


HOSTILE = [
    ("300|n01|2026-11-01T10:00:00|2026-11-01T11:00:00|COMPLETED", "5 fields"),
    ("301|n01|yesterday|2026-11-01T11:00:00|COMPLETED|batch", "bad time"),
    ("302|n01|2026-11-01T10:00:00|2026-13-01T11:00:00|COMPLETED|batch", "bad time"),
    ("303|n[01-|2026-11-01T10:00:00|2026-11-01T11:00:00|COMPLETED|batch", "unclosed"),
    ("304|n[02-01]|2026-11-01T10:00:00|2026-11-01T11:00:00|COMPLETED|batch", "ends below"),
    ("305|r[1-9999]n[1-9999]|2026-11-01T10:00:00|Unknown|RUNNING|batch", "more than"),
    ("306|n01|2026-11-01T11:00:00|2026-11-01T10:00:00|COMPLETED|batch", "ends before"),
    ("|n01|2026-11-01T10:00:00|2026-11-01T11:00:00|COMPLETED|batch", "bad JobID"),
    ("307|n01|99999999999999999999|Unknown|RUNNING|batch", "bad time"),
    ("\x00\xff|||||||", "8 fields"),
    ("|||||", "bad JobID"),
]


@pytest.mark.parametrize(("line", "reason"), HOSTILE)
def test_hostile_line_is_skipped_and_counted(line: str, reason: str):
    good = "400|n01|2026-11-01T10:00:00|2026-11-01T11:00:00|COMPLETED|batch"
    reading = parse_sacct(f"{SACCT.splitlines()[0]}\n{line}\n{good}\n", UTC)
    assert reading.skipped == {"unreadable": 1}
    assert reading.problems[0].startswith("line 2: ") and reason in reading.problems[0]
    assert [job.what for job in reading.allocations] == ["400"]


def test_hostile_lines_reach_the_cli_as_a_count(files: dict[str, Path], tmp_path: Path):
    files["sacct"].write_text(SACCT + "\n".join(line for line, _ in HOSTILE) + "\n")
    result = from_slurm(files, tmp_path / "mine.csv", "--exclude-partition", "scavenger")
    assert result.exit_code == 0, result.stderr
    assert f"{len(HOSTILE)} unreadable lines skipped (first: line 14: 5 fields" in result.stderr


def test_parsable_trailing_bar_and_crlf():
    text = "JobID|NodeList|Start|End|State|Partition|\r\n"
    text += "1|n01|2026-11-01T10:00:00|2026-11-01T10:00:09|COMPLETED||\r\n"
    reading = parse_sacct(text, UTC)
    assert reading.skipped == {} and reading.allocations[0].partition == ""
    assert (reading.allocations[0].end - reading.allocations[0].start).seconds == 9


def test_epoch_seconds_need_no_zone():
    text = "JobID|NodeList|Start|End\n1|n01|1793527200|1793527260\n"
    job = parse_sacct(text).allocations[0]
    assert job.start == datetime(2026, 11, 1, 10, tzinfo=UTC) and job.nodes == ("n01",)


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "empty"), ("\n\n", "empty"), ("JobID|NodeList|Start\n", "no End column")],
)
def test_unusable_text_raises(text: str, message: str):
    with pytest.raises(AccountingFormatError, match=message):
        parse_sacct(text)


def test_hostlist_cross_product_is_bounded_before_expansion():
    with pytest.raises(NodeListError, match="more than"):
        parse_node_list("r[1-99999]n[1-99999]")
    with pytest.raises(NodeListError, match="too long"):
        parse_node_list("n[1-600000,1-600000]")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sacct": "garbage\n"}, "has no JobID column"),
        ({"sacct": ""}, "no header line"),
        ({"sacct": "JobID|NodeList|Start|End\n"}, "no Partition column"),
        ({"--nodes": "n[01-"}, "--nodes: unclosed"),
        ({"--nodes": "@/nonexistent/nodes.txt"}, "--nodes @/nonexistent"),
        ({"--start": "2026-11-01T12:00:00"}, "is not before --end"),
        ({"--start": "soon"}, "--start 'soon': not an ISO 8601 time"),
        ({"--tz": "Mars/Olympus"}, "--tz 'Mars/Olympus'"),
        ({"--out": "trace.parquet"}, "must end in .csv or .csv.gz"),
        ({"--events": "events.txt", "events": "Cluster|State\n"}, "no NodeName column"),
        ({"--events": "missing.txt"}, "--events"),
    ],
)
def test_unusable_input_is_one_line_and_exit_2(tmp_path: Path, change: dict, message: str):
    options = {
        "--nodes": "n[01-04]",
        "--start": "2026-11-01T10:00:00",
        "--end": "2026-11-01T12:00:00",
        "--out": "mine.csv",
        "--tz": "UTC",
        "--exclude-partition": "scavenger",
    }
    options.update({key: value for key, value in change.items() if key.startswith("--")})
    for key in ("--out", "--events"):
        if key in options:
            options[key] = str(tmp_path / options[key])
    (tmp_path / "jobs.txt").write_text(change.get("sacct", SACCT))
    (tmp_path / "events.txt").write_text(change.get("events", EVENTS))
    argv = ["trace", "from-slurm", str(tmp_path / "jobs.txt")]
    argv += [item for key, value in options.items() for item in (key, value)]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_replay_runs_on_a_converted_trace(
    files: dict[str, Path], tmp_path: Path, bftrainer_dir: Path
):
    trace = tmp_path / "mine.csv.gz"
    result = from_slurm(
        files, trace, "--exclude-partition", "scavenger", "--events", str(files["events"])
    )
    assert result.exit_code == 0, result.stderr
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "".join((bftrainer_dir / data.IMAGENET_JOBS_FILE).read_text().splitlines(True)[:4])
    )
    out = tmp_path / "replay"
    result = runner.invoke(
        app,
        [
            "replay",
            "--trace",
            str(trace),
            "--jobs",
            str(jobs),
            "--scalability",
            str(bftrainer_dir / data.SCALABILITY_FILE),
            "--policy",
            "greedy",
            "--no-baselines",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    greedy = json.loads((out / "report.json").read_text())["policies"]["greedy"]
    # Down spells are written busy: the replay lends only the idle node-seconds.
    assert greedy["idle_node_s"] == pytest.approx(IDLE_S)
    assert greedy["samples_trained"] > 0


def test_a_missing_option_is_one_line_and_exit_2(tmp_path: Path):
    result = runner.invoke(app, ["trace", "from-slurm", str(tmp_path / "jobs.txt")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: interstice trace from-slurm: Missing option")


def test_the_synthetic_trace_is_a_trace_command_too(tmp_path: Path):
    out = tmp_path / "synthetic.csv.gz"
    argv = ["trace", "synthetic", "--out", str(out), "--nodes", "4", "--days", "1"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert len(load_trace(out).node_names) == 4
