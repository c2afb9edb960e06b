"""Every code block of the guides (docs/user-guide/, docs/admin-guide/) does what the page
says: bash blocks run against a live service with real agents, titled blocks are files
checked by the command that reads them (or compared with the shipped ones), sh blocks are
checked, text blocks are output. The convention is in guide_blocks.py's docstring.

One test per page; then the harness's own tests, on the sample pages in samples/ and on
small pages written here.
"""

from pathlib import Path
from typing import Any

import guide_blocks
import pytest
from guide_blocks import REPO, needs_service, page_name, parse_blocks, run_page

SAMPLES = Path(__file__).parent / "samples"
GUIDE_FOLDERS = ("user-guide", "admin-guide")


def guide_pages() -> list[Path]:
    """The Markdown pages of the guides, in name order."""
    return sorted(
        page for folder in GUIDE_FOLDERS for page in (REPO / "docs" / folder).rglob("*.md")
    )


def page_param(page: Path) -> object:
    """A page as a test parameter; slow when its bash blocks need the live service."""
    marks = [pytest.mark.slow] if needs_service(page) else []
    return pytest.param(page, marks=marks, id=page_name(page))


def check_page(page: Path, folder: Path, request: pytest.FixtureRequest) -> None:
    """Run ``page`` (against the live service when it has bash blocks) and fail with every
    failure; skip, naming them, when only programs CI installs were missing."""
    service: Any = None  # conftest.GuideService
    if needs_service(page):
        service = request.getfixturevalue("guide_service")
    try:
        result = run_page(page, folder, service.env if service else None)
    finally:
        if service is not None:
            service.cancel_active_jobs()
    assert not result.failures, "\n\n".join(result.failures)
    if result.unchecked:
        pytest.skip("every other check passed; unchecked here:\n" + "\n".join(result.unchecked))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", [page_param(page) for page in guide_pages()])
def test_guide_page(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    check_page(page, tmp_path / "page", request)


# --- the harness itself ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sample_user_page_trains_its_jobs(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    check_page(SAMPLES / "user-guide.md", tmp_path, request)
    assert (tmp_path / "jobs" / "small.toml").is_file()
    assert (tmp_path / "submitted").read_text().startswith("Submitted job ")


def test_sample_admin_page_passes(tmp_path: Path) -> None:
    """Files compared with what `interstice slurm` renders, sh checked; its one bash block
    needs no service (the token goes to a database in the page folder)."""
    result = run_page(SAMPLES / "admin-guide.md", tmp_path)
    assert result.failures == []
    assert result.ran == 1
    assert (tmp_path / "etc" / "interstice" / "agent.conf").is_file()  # absolute title


def write_page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


def test_a_failing_bash_block_names_page_line_and_output_and_stops_the_next(
    tmp_path: Path,
) -> None:
    page = write_page(
        tmp_path,
        "# Page\n\n```bash\necho fine\n```\n\nThen:\n\n"
        "```bash\necho 'the output before'\nfalse\necho never\n```\n\n"
        "```bash\ntouch ran-after\n```\n",
    )
    result = run_page(page, tmp_path / "run")
    assert result.ran == 1
    (failure,) = result.failures
    assert failure.startswith(f"{page}:9: bash block failed (exit code 1)")
    assert "the output before" in failure
    assert "never" not in failure.split("--- output tail:")[1]
    assert not (tmp_path / "run" / "ran-after").exists()


def test_a_bash_block_past_its_time_limit_is_killed_with_what_it_started(
    tmp_path: Path,
) -> None:
    page = write_page(tmp_path, "```bash\nsleep 60 &\necho started\nsleep 60\n```\n")
    result = run_page(page, tmp_path / "run", timeout_s=1)
    (failure,) = result.failures
    assert f"{page}:1: bash block failed (timed out after 1 s)" in failure
    assert "started" in failure


def test_bash_blocks_run_with_strict_options_in_the_page_folder(tmp_path: Path) -> None:
    page = write_page(
        tmp_path,
        '```toml title="sub/job.toml"\ncommand = ["examples/train_digits.py"]\nworkdir = ".."\n'
        "min_nodes = 1\nmax_nodes = 1\ntotal_samples = 64\nglobal_batch_size = 64\n```\n\n"
        "```bash\ntest -f sub/job.toml && test -f examples/train_digits.py\n"
        'test "$HOME" = "$PWD/.home"\necho "$UNSET_VARIABLE"\n```\n',
    )
    result = run_page(page, tmp_path / "run")
    (failure,) = result.failures
    assert f"{page}:10: bash block failed (exit code 1)" in failure
    assert "UNSET_VARIABLE: unbound variable" in failure


def test_languages_other_than_bash_sh_text_need_a_title(tmp_path: Path) -> None:
    page = write_page(
        tmp_path,
        '```python\nprint(1)\n```\n\n```\nplain\n```\n\n```json title="a.json"\n{"a": 1}\n```\n\n'
        "```json\n{}\n```\n\n```text\nanything $(goes)\n```\n",
    )
    failures = run_page(page, tmp_path / "run").failures
    assert len(failures) == 3
    assert failures[0].startswith(f"{page}:1: a python block without a title")
    assert failures[1].startswith(f"{page}:5: a code block without a language")
    assert failures[2].startswith(f"{page}:13: a json block without a title")


def test_titled_files_are_checked_by_their_readers(tmp_path: Path) -> None:
    page = write_page(
        tmp_path,
        '```toml title="bad.toml"\ncommand = ["x.py"]\nmin_nodes = 1\nmax_nodes = 1\n'
        "total_samples = 64\nglobal_batch_size = 64\ngpus = 2\n```\n\n"
        '```toml title="serve.toml"\nport = "eighty"\n```\n\n'
        '```toml title="~/.config/interstice/client.toml"\nserver = "http://h:8000"\n```\n\n'
        '```python title="train.py"\ndef f(:\n```\n\n'
        '```json title="data.json"\n{"a": }\n```\n',
    )
    failures = run_page(page, tmp_path / "run").failures
    assert len(failures) == 4, failures
    assert failures[0].startswith(f"{page}:1: toml bad.toml: job file: error: bad.toml: gpus:")
    assert "unknown key" in failures[0]
    assert failures[1].startswith(f"{page}:10: toml serve.toml: service setting port:")
    assert failures[2].startswith(f"{page}:18: python train.py: does not parse")
    assert failures[3].startswith(f"{page}:22: json data.json: does not parse")
    assert (tmp_path / "run" / ".home" / ".config" / "interstice" / "client.toml").is_file()


def test_shipped_and_rendered_files_are_compared_with_the_real_ones(tmp_path: Path) -> None:
    slurm = guide_blocks._slurm_dir()
    prolog = (slurm / "prolog.sh").read_text().splitlines()
    from interstice.agents.slurm.scripts import PlaceholderJob, render_sbatch

    sbatch = render_sbatch(PlaceholderJob(partition="scavenger", time_limit="2:00:00"))
    page = write_page(
        tmp_path,
        '```bash title="prolog.sh"\n' + "\n".join(prolog[-4:]) + "\n```\n\n"
        '```bash title="/opt/interstice/epilog.sh"\nexit 1\n```\n\n'
        '```bash title="placeholder.sbatch"\n' + sbatch + "```\n\n"
        '```ini title="slurm.conf"\nPartitionName=scavenger GraceTime=30\nProlog=/p\nEpilog=/e\n'
        "```\n\n"
        '```ini title="agent.conf"\nserver_url=ftp://x\nagent_token=t\n```\n',
    )
    failures = run_page(page, tmp_path / "run").failures
    assert len(failures) == 3, failures
    assert failures[0].startswith(f"{page}:8: bash /opt/interstice/epilog.sh: not the shipped")
    assert "differs from `interstice slurm conf` with the same values" in failures[1]
    assert "PartitionName=scavenger Nodes=ALL PriorityTier=0" in failures[1]
    assert "agent.conf: server_url:" in failures[2]


def test_sh_blocks_are_checked_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(guide_blocks.CI_PACKAGES, "not-here-slurmish", "slurm-wlm")
    page = write_page(
        tmp_path,
        "```sh\ntouch ran\nsudo -u postgres ls | grep x\n```\n\n"
        "```sh\nif true; then\n```\n\n"
        "```sh\nX=1 no-such-program --flag && echo ok\n```\n\n"
        "```sh\nnot-here-slurmish --partition scavenger\n```\n",
    )
    result = run_page(page, tmp_path / "run")
    assert not (tmp_path / "run" / "ran").exists()
    assert len(result.failures) == 2, result.failures
    assert result.failures[0].startswith(f"{page}:6: sh block: bash -n:")
    assert result.failures[1].startswith(f"{page}:10: sh block calls 'no-such-program'")
    (unchecked,) = result.unchecked
    assert unchecked.startswith(f"{page}:14: not-here-slurmish not on PATH here (Debian slurm-wlm")


def test_programs_are_the_first_words_of_simple_commands() -> None:
    script = (
        "# a comment\nsudo -u postgres psql -c 'select 1' | tee out\n"
        "for n in a b; do scontrol show node $n; done\n"
        'job=$(interstice job submit x) && echo "$job"\n'
        "cat <<EOF > f\nnot a command\nEOF\n"
        "X=1 timeout 5 sbatch \\\n  --wrap 'hostname'\n"
        "$EDITOR file; [ -f x ] || exec srun true\n"
        "for i in 0 1; do agent --ports $((29610+2*i)) --workdir w & done\n"
        'curl -d \'{"events": [\n  {"node": "n0"}]}\' http://h  # a string over lines\n'
    )
    assert guide_blocks.programs(script) == [
        "sudo",
        "psql",
        "tee",
        "scontrol",
        "interstice",
        "cat",
        "timeout",
        "sbatch",
        "srun",
        "agent",
        "curl",
    ]


def test_blocks_are_parsed_with_lines_titles_and_indents() -> None:
    text = (
        "# T\n\n!!! note\n    ```bash\n    echo in\n    ```\n\n"
        '~~~toml title="a b/c.toml" linenums="1"\nx = 1\n```\n~~~\n\n'
        "````text\n```\n````\n"
    )
    blocks = parse_blocks(text)
    assert [(b.language, b.line, b.title, b.text) for b in blocks] == [
        ("bash", 4, None, "echo in\n"),
        ("toml", 8, "a b/c.toml", "x = 1\n```\n"),
        ("text", 13, None, "```\n"),
    ]
    with pytest.raises(ValueError, match="line 1: code fence ``` is never closed"):
        parse_blocks("```bash\necho\n")
