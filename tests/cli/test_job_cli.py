"""``interstice job`` against a real service: submit from a TOML file and from flags, list,
show, logs, cancel, wait; where the server and token come from; bad input is exit code 2
and one line, an unreachable service exit code 1."""

import json
import os
import threading
from pathlib import Path

from cli_helpers import Cli

from interstice import wire

JOB_TOML = """\
command = ["train.py", "--checkpoint-dir", "{checkpoint_dir}", "--total-samples", "{total_samples}"]
workdir = "code"
min_nodes = 1
max_nodes = 3
total_samples = 5000
global_batch_size = 64
nproc_per_node = 1
env = { SEED = "7" }
"""


def submitted_id(output: str) -> str:
    """The id in ``Submitted job j-N``."""
    assert output.startswith("Submitted job "), output
    return output.split()[-1]


def one_line_error(result, code: int) -> str:
    """The single stderr line of a failed command (no traceback)."""
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def submit_flags(cli: Cli, *extra: str) -> str:
    result = cli("submit", "--command", "train.py", "--nodes", "1:2", "--total-samples", "100",
                 *extra)  # fmt: skip
    assert result.exit_code == 0, result.output
    return submitted_id(result.stdout)


def test_submit_from_toml_then_show_has_every_key(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(JOB_TOML)
    result = cli("submit", str(tmp_path / "job.toml"))
    assert result.exit_code == 0, result.output
    job_id = submitted_id(result.stdout)

    shown = cli("show", job_id, "--json")
    assert shown.exit_code == 0, shown.output
    job = json.loads(shown.stdout)
    assert job["job_id"] == job_id and job["state"] == "queued"
    assert job["command"][0] == "train.py" and "{checkpoint_dir}" in job["command"]
    assert job["workdir"] == str(tmp_path / "code")  # relative to the job file's folder
    assert (job["min_nodes"], job["max_nodes"]) == (1, 3)
    assert (job["total_samples"], job["global_batch_size"]) == (5000, 64)
    assert job["nproc_per_node"] == 1 and job["env"] == {"SEED": "7"}
    assert job["entrypoint"] is None

    table = cli("show", job_id)
    assert table.exit_code == 0, table.output
    rows = {line.split(maxsplit=1)[0]: line for line in table.stdout.splitlines() if line}
    assert "5000" in rows["total_samples"] and "queued" in rows["state"]


def test_flags_override_the_file_and_submit_alone(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(JOB_TOML)
    result = cli(
        "submit", str(tmp_path / "job.toml"), "--nodes", "2", "--total-samples", "800",
        "--env", "EXTRA=a=b", "--nproc-per-node", "auto", "--workdir", "elsewhere",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    job = json.loads(cli("show", submitted_id(result.stdout), "--json").stdout)
    assert (job["min_nodes"], job["max_nodes"], job["total_samples"]) == (2, 2, 800)
    assert job["env"] == {"SEED": "7", "EXTRA": "a=b"}
    assert job["nproc_per_node"] == "auto"
    assert job["workdir"] == str(tmp_path / "elsewhere")  # relative to where one submits

    job_id = submit_flags(cli, "--command", "train.py --lr '1e-3 x'", "--priority", "2")
    job = json.loads(cli("show", job_id, "--json").stdout)
    assert job["command"] == ["train.py", "--lr", "1e-3 x"]
    assert job["workdir"] == str(tmp_path)  # sbatch's default: the submitting folder
    assert job["priority"] == 2


def test_list_cancel_and_wait_on_a_cancelled_job(cli: Cli) -> None:
    kept, cancelled = submit_flags(cli), submit_flags(cli)
    listed = cli("list")
    assert listed.exit_code == 0, listed.output
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows[kept][1] == "queued" and rows[cancelled][1] == "queued"
    assert rows[kept][3] == "1:2" and rows[kept][5] == "0/100"

    result = cli("cancel", cancelled)
    assert result.exit_code == 0 and result.stdout.strip() == f"job {cancelled} cancelled"
    only = cli("list", "--state", "cancelled")
    assert cancelled in only.stdout and kept not in only.stdout

    waited = cli("wait", cancelled)
    assert waited.exit_code == 1 and waited.stderr.strip() == f"job {cancelled} cancelled"
    # A job that has not ended: wait gives up at its timeout with exit code 124.
    assert cli("wait", kept, "--timeout-s", "0", "--period-s", "0").exit_code == 124

    again = one_line_error(cli("cancel", cancelled), 2)
    assert "409" in again and "cancelled" in again


def write_rank_log(job_dir: Path, generation: int, rank: int, text: str) -> Path:
    path = wire.rank_log_path(job_dir, f"{job_dir.name}-g{generation}", rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_logs_span_generations_tail_ranks_and_follow_until_the_end(cli: Cli) -> None:
    job_id = submit_flags(cli)
    job_dir = Path(json.loads(cli("show", job_id, "--json").stdout)["job_dir"])
    write_rank_log(job_dir, 0, 0, "g0 line 1\ng0 line 2\n")
    newest = write_rank_log(job_dir, 1, 0, "g1 line 1\n")
    write_rank_log(job_dir, 1, 1, "rank one\n")

    result = cli("logs", job_id)
    assert result.exit_code == 0, result.output
    assert result.stdout == "g0 line 1\ng0 line 2\ng1 line 1\n"
    assert cli("logs", job_id, "--tail", "2").stdout == "g0 line 2\ng1 line 1\n"
    assert cli("logs", job_id, "--rank", "1").stdout == "rank one\n"

    # --follow prints what is appended and returns once the job has ended.
    def append_then_cancel() -> None:
        with newest.open("a") as log:
            log.write("appended\n")
        cli.service.request("user", "DELETE", f"/v1/jobs/{job_id}")

    writer = threading.Thread(target=append_then_cancel)
    writer.start()
    followed = cli("logs", job_id, "--follow", "--period-s", "0.1")
    writer.join()
    assert followed.exit_code == 0, followed.output
    assert followed.stdout.endswith("g1 line 1\nappended\n")
    assert followed.stdout.count("appended") == 1


def test_follow_waits_for_a_log_that_does_not_exist_yet(cli: Cli) -> None:
    job_id = submit_flags(cli)
    job_dir = Path(json.loads(cli("show", job_id, "--json").stdout)["job_dir"])
    assert "no log" in one_line_error(cli("logs", job_id), 2)

    def start_then_cancel() -> None:
        write_rank_log(job_dir, 1, 0, "first words\n")
        cli.service.request("user", "DELETE", f"/v1/jobs/{job_id}")

    writer = threading.Thread(target=start_then_cancel)
    writer.start()
    followed = cli("logs", job_id, "--follow", "--period-s", "0.1")
    writer.join()
    assert followed.exit_code == 0, followed.output
    assert followed.stdout == "first words\n"


def write_config(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "client.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_server_and_token_come_from_flag_then_env_then_file(
    cli: Cli, tmp_path: Path, monkeypatch
) -> None:
    url, token = cli.service.url, cli.service.tokens["user"]
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    config = write_config(tmp_path, f'server = "{url}"\ntoken = "{token}"\n')
    monkeypatch.setenv("INTERSTICE_CONFIG", str(config))
    assert cli("list", auth=False).exit_code == 0  # the file alone

    monkeypatch.setenv("INTERSTICE_TOKEN", "wrong")
    assert "401" in one_line_error(cli("list", auth=False), 2)  # env over file
    assert cli("list", "--token", token, auth=False).exit_code == 0  # flag over env

    monkeypatch.setenv("INTERSTICE_TOKEN", token)
    monkeypatch.setenv("INTERSTICE_SERVER", dead)
    assert "cannot reach" in one_line_error(cli("list", auth=False), 1)  # env over file
    assert cli("list", "--server", url, auth=False).exit_code == 0  # flag over env

    # The default file is ~/.config/interstice/client.toml.
    for name in ("INTERSTICE_CONFIG", "INTERSTICE_TOKEN", "INTERSTICE_SERVER"):
        monkeypatch.delenv(name)
    default = Path(os.environ["HOME"]) / ".config" / "interstice" / "client.toml"
    default.parent.mkdir(parents=True)
    default.write_text(config.read_text())
    default.chmod(0o600)
    assert cli("list", auth=False).exit_code == 0


def test_a_readable_token_file_or_a_bad_config_is_refused(
    cli: Cli, tmp_path: Path, monkeypatch
) -> None:
    token = cli.service.tokens["user"]
    monkeypatch.setenv("INTERSTICE_CONFIG", str(tmp_path / "client.toml"))
    write_config(tmp_path, f'token = "{token}"\n', mode=0o644)
    assert "chmod 600" in one_line_error(cli("list", auth=False), 2)
    write_config(tmp_path, f'token = "{token}"\nservr = "x"\n')
    assert "servr" in one_line_error(cli("list", auth=False), 2)
    write_config(tmp_path, "token = [")
    assert "client.toml" in one_line_error(cli("list", auth=False), 2)
    (tmp_path / "client.toml").unlink()
    assert "does not exist" in one_line_error(cli("list", auth=False), 2)
    monkeypatch.delenv("INTERSTICE_CONFIG")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no munge either (test_munge_cli.py)
    assert "no token" in one_line_error(cli("list", auth=False), 2)


def test_bad_job_files_and_flags_are_one_line_naming_the_key(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    cases = {
        JOB_TOML + "batch_sise = 3\n": "batch_sise: unknown key",
        JOB_TOML.replace("5000", "1.5"): "total_samples",
        JOB_TOML.replace("max_nodes = 3", 'max_nodes = "many"'): "max_nodes",
        JOB_TOML.replace('env = { SEED = "7" }', "env = { SEED = 7 }"): "env.SEED",
        "command = [": str(path),
    }
    for text, named in cases.items():
        path.write_text(text)
        assert named in one_line_error(cli("submit", str(path)), 2), text
    assert "job.tom" in one_line_error(cli("submit", str(tmp_path / "job.tom")), 2)
    path.write_text(JOB_TOML)
    assert "--nodes" in one_line_error(cli("submit", str(path), "--nodes", "1-4"), 2)
    assert "--env" in one_line_error(cli("submit", "--env", "NOEQUALS"), 2)
    path.write_text(JOB_TOML.replace('env = { SEED = "7" }', 'env = "SEED=7"'))
    assert "env" in one_line_error(cli("submit", str(path), "--env", "A=1"), 2)
    fractional = cli("submit", "--command", "x.py", "--nodes", "1", "--total-samples", "1.5")
    assert "total_samples" in one_line_error(fractional, 2)


def test_http_errors_are_one_line_with_the_service_detail(cli: Cli) -> None:
    line = one_line_error(cli.as_token("not-a-token", "list"), 2)
    assert "401" in line and "invalid bearer token" in line
    assert "404" in one_line_error(cli("show", "j-999999"), 2)
    assert "state" in one_line_error(cli("list", "--state", "sleeping"), 2)  # the API's 422
    # A token of another role: 403 naming the role.
    assert "403" in one_line_error(cli.as_token(cli.service.tokens["scheduler"], "list"), 2)


def test_numeric_options_out_of_range_are_one_line_naming_the_option(cli: Cli) -> None:
    job_id = submit_flags(cli)
    refused = {
        ("wait", job_id, "--timeout-s", "-1"): "--timeout-s",
        ("wait", job_id, "--timeout-s", "nan"): "--timeout-s",
        ("wait", job_id, "--period-s", "-2"): "--period-s",
        ("wait", job_id, "--timeout-s", "soon"): "--timeout-s",
        ("logs", job_id, "--tail", "-1"): "--tail",
        ("logs", job_id, "--rank", "-1"): "--rank",
        ("logs", job_id, "--rank", "1.5"): "--rank",
        ("logs", job_id, "--follow", "--period-s", "inf"): "--period-s",
        ("list", "--limit", "0"): "--limit",
    }
    for args, option in refused.items():
        assert option in one_line_error(cli(*args), 2), args
    # A bound itself is accepted: a wait of 0 s on a queued job times out at once.
    assert cli("wait", job_id, "--timeout-s", "0", "--period-s", "3600").exit_code == 124
