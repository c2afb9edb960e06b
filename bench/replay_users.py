"""Two users on one window of the Summit trace: does a user with 50 queued jobs take the
harvest from a user with one?

Builds the jobs file from BFTrainer's lists (never copied into the repository): user ``hpo``
submits the first 50 jobs of ``jobs-shufflenet-hpo-1000.csv`` (one every 36 s), user
``imagenet`` one job of ``jobs-imagenet-1001.csv`` (``--single``: J00016, ResNet-18, comes
after the 17th HPO job; J00014, AlexNet, the worst-scaling model, after the 16th). Then it
replays the MILP (no baselines) with and without the ``user`` column, at fairness weight 0
and each of ``--fairness``; and prints one JSON line per replay with each user's harvest,
finished jobs and mean completion time.

    python bench/replay_users.py [--start ISO] [--hours 6] [--nodes 192] [--seed 1]
        [--single J00016] [--fairness 0.1,1] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
from pathlib import Path

from interstice import data

HPO_JOBS = 50


def write_mix(folder: Path, path: Path, users: bool, single: str) -> None:
    """The two users' jobs file at ``path``: the HPO jobs and ImageNet job ``single``;
    without ``users`` no ``user`` column."""
    with (folder / "jobs-shufflenet-hpo-1000.csv").open() as f:
        hpo = list(csv.DictReader(f))[:HPO_JOBS]
    with (folder / data.IMAGENET_JOBS_FILE).open() as f:
        chosen = [row for row in csv.DictReader(f) if row["job_id"] == single]
    rows = [{**row, "job_id": f"hpo-{row['job_id']}", "user": "hpo"} for row in hpo]
    rows += [{**row, "job_id": f"imagenet-{row['job_id']}", "user": "imagenet"} for row in chosen]
    columns = [*hpo[0].keys()] + (["user"] if users else [])
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default="2021-02-10T20:21:15")
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--nodes", type=int, default=192)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--single", default="J00016", help="the ImageNet job (J00016: resnet18, J00014: AlexNet)"
    )
    parser.add_argument("--fairness", default="0.1,1", help="weights, comma-separated")
    parser.add_argument("--out", type=Path, default=Path("replay-users"))
    args = parser.parse_args()
    folder = data.data_dir()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = []
    for users in (False, True):
        jobs = args.out / f"jobs-{'users' if users else 'no-users'}.csv"
        write_mix(folder, jobs, users, args.single)
        for fairness in (0.0, *(float(w) for w in args.fairness.split(","))):
            out = args.out / f"{'users' if users else 'no-users'}-fairness-{fairness:g}"
            subprocess.run(
                ["interstice", "replay", "--jobs", str(jobs),
                 "--start", args.start, "--hours", str(args.hours), "--nodes", str(args.nodes),
                 "--seed", str(args.seed), "--no-baselines",
                 "--fairness", str(fairness), "--out", str(out)],
                check=True,
            )  # fmt: skip
            figures = json.loads((out / "report.json").read_text())["policies"]["milp"]
            model = {"J00016": "resnet18", "J00014": "AlexNet"}.get(args.single, "")
            per_user = figures["by_user"] if users else _per_user(out, model)
            lines.append({"users": users, "fairness": fairness, "harvest": figures["harvest"],
                          "replay_wall_s": figures["replay_wall_s"],
                          "by_user": per_user})  # fmt: skip
    for line in lines:
        print(json.dumps(line))


def _per_user(out: Path, single: str) -> dict:
    """Without the ``user`` column the report has no ``by_user``: the same figures from the
    per-model ones (each user runs one model here: shufflenet, and ``single``'s)."""
    figures = json.loads((out / "report.json").read_text())["policies"]["milp"]
    idle_h = figures["idle_node_hours"]
    return {
        user: {"harvested_node_hours": part["harvested_node_hours"],
               "harvest": part["harvested_node_hours"] / idle_h,
               "jobs_finished": part["jobs_finished"], "jobs_arrived": part["jobs_arrived"],
               "jct_mean_s": part["jct_mean_s"]}
        for user, model in (("hpo", "shufflenet"), ("imagenet", single))
        if (part := figures["by_model"].get(model)) is not None
    }  # fmt: skip


if __name__ == "__main__":
    main()
