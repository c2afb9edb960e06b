"""The allocation problem's data: what the optimizer reads and what it answers.

Inputs are frozen pydantic models validated at construction, so a bad snapshot fails with a
message naming the field before any solver runs. Outputs are separate frozen models.

Units: times in seconds (``*_s``), rates in samples per second (``samples_per_s``), counts in
nodes. A *sample* is one training example; *goodput* is samples of full-backpropagation
progress (samples x ``progress_per_sample``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from functools import cached_property
from typing import Literal

import numpy as np
from interstice.optimizer.coverage import FORECAST_MIN_COVERAGE
from interstice.optimizer.forecast import NodeLives, node_lives, score_forecast_options
from interstice.optimizer.objective import score_options, share_unit
from pydantic import BaseModel, ConfigDict, Field, model_validator

Frozen = ConfigDict(frozen=True, extra="forbid")

SolveStatus = Literal["optimal", "feasible", "fallback"]
"""``optimal``: proven optimal, or proven within ``Problem.relative_gap`` of the optimum when
that is above 0 (or trivial: no jobs, or nothing to give); ``feasible``: the
solver's best incumbent at the time limit, or a policy's answer (``greedy``,
``equal_share``) asked for directly; ``fallback``: the solver had no incumbent at the time
limit, so the answer is the greedy marginal-gain allocation."""

COMPLETION_S = 100_000.0
"""Default tau of the completion term (i), seconds (:class:`Weights`, formulation docstring)."""

FORECAST_CLASSES = 1
"""Default ``Problem.forecast_classes``: one class of nodes forecast to leave within the
horizon, valued at the shortest life among them (formulation docstring, "Cost, honestly")."""

MIN_TILT = 1e-6
"""Floor of the completion tilt, so a job submitted long after the others still has values
that order its options."""


class ScalabilityPoint(BaseModel):
    """One measured throughput: ``model`` on ``nodes`` nodes at SPB depth ``spb_depth``.

    Attributes:
        model: model name, as in the jobs' ``model`` field.
        nodes: node count the rate was measured at (0 gives rate 0).
        samples_per_s: measured training throughput of the whole job, samples/s.
        spb_depth: Structured Partial Backpropagation depth (0 = ordinary data parallel).
        progress_per_sample: samples of full-backprop progress one sample at this depth is
            worth, in (0, 1]; 1 at depth 0.
        derived: computed (e.g. depth-0 rates times a ratio), not measured: a depth > 0
            with a derived row is never offered to a job (:meth:`Problem.depths_of`).
    """

    model_config = Frozen

    model: str = Field(min_length=1)
    nodes: int = Field(ge=0)
    samples_per_s: float = Field(ge=0)
    spb_depth: int = Field(default=0, ge=0)
    progress_per_sample: float = Field(default=1.0, gt=0, le=1)
    derived: bool = False


class ScalabilityTable(BaseModel):
    """Measured samples/s per (model, node count, SPB depth).

    Counts between measured points interpolate linearly (as BFTrainer's MILP does, arXiv
    2106.12091); 0 nodes is 0 samples/s. Counts above the largest measured one are not
    admissible: :meth:`Problem.max_count` caps a job's ``max_nodes`` there, so no rate is
    ever extrapolated.
    """

    model_config = Frozen

    points: tuple[ScalabilityPoint, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_rate_per_point(self) -> ScalabilityTable:
        """One rate per (model, nodes, depth), one ``progress_per_sample`` and a row with
        nodes > 0 per (model, depth); checked in one pass over the rows and one over the
        groups, so the time is linear in the rows.

        Raises:
            ValueError: the first rule broken, naming the model, depth (and count).
        """
        seen: set[tuple[str, int, int]] = set()
        for p in self.points:
            key = (p.model, p.nodes, p.spb_depth)
            if key in seen:
                raise ValueError(
                    f"scalability table: duplicate row for model {p.model!r}, "
                    f"nodes {p.nodes}, spb_depth {p.spb_depth}"
                )
            seen.add(key)
        for (model, depth), rows in self._groups.items():
            if len({p.progress_per_sample for p in rows}) > 1:
                raise ValueError(
                    f"scalability table: model {model!r} depth {depth} has more than one "
                    "progress_per_sample"
                )
            if not any(p.nodes > 0 for p in rows):
                raise ValueError(
                    f"scalability table: model {model!r} depth {depth} has no row with nodes > 0"
                )
        return self

    @cached_property
    def _groups(self) -> dict[tuple[str, int], list[ScalabilityPoint]]:
        """The rows per (model, SPB depth), in the order of their first row."""
        groups: dict[tuple[str, int], list[ScalabilityPoint]] = {}
        for p in self.points:
            groups.setdefault((p.model, p.spb_depth), []).append(p)
        return groups

    @cached_property
    def _curves(self) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray, float]]:
        curves: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, float]] = {}
        for key, group in self._groups.items():
            rows = sorted(group, key=lambda p: p.nodes)
            counts = [p.nodes for p in rows]
            rates = [p.samples_per_s for p in rows]
            if counts[0] != 0:
                counts, rates = [0, *counts], [0.0, *rates]
            curves[key] = (np.array(counts), np.array(rates), rows[0].progress_per_sample)
        return curves

    @cached_property
    def _depths(self) -> dict[str, tuple[int, ...]]:
        depths: dict[str, list[int]] = {}
        for model, depth in self._curves:
            depths.setdefault(model, []).append(depth)
        return {model: tuple(sorted(ds)) for model, ds in depths.items()}

    @cached_property
    def _derived(self) -> frozenset[tuple[str, int]]:
        return frozenset((p.model, p.spb_depth) for p in self.points if p.derived)

    def measured(self, model: str, spb_depth: int) -> bool:
        """Whether no row of ``model`` at ``spb_depth`` is derived (all were measured)."""
        return (model, spb_depth) not in self._derived

    @property
    def models(self) -> frozenset[str]:
        """Every model name in the table."""
        return frozenset(self._depths)

    def depths(self, model: str) -> tuple[int, ...]:
        """The SPB depths measured for ``model``, ascending.

        Raises:
            KeyError: ``model`` is not in the table.
        """
        try:
            return self._depths[model]
        except KeyError:
            raise KeyError(f"model {model!r} is not in the scalability table") from None

    def max_nodes(self, model: str, spb_depth: int = 0) -> int:
        """Largest measured node count of ``model`` at ``spb_depth`` (no extrapolation above it)."""
        return int(self._curve(model, spb_depth)[0][-1])

    def samples_per_s(self, model: str, nodes: int, spb_depth: int = 0) -> float:
        """Throughput of ``model`` on ``nodes`` nodes at ``spb_depth``, samples/s.

        Linear interpolation between measured counts (as BFTrainer's MILP does, arXiv 2106.12091).

        Raises:
            KeyError: unknown model or depth.
            ValueError: ``nodes`` is negative or above the largest measured count.
        """
        return float(self.samples_per_s_array(model, np.array([nodes]), spb_depth)[0])

    def samples_per_s_array(self, model: str, nodes: np.ndarray, spb_depth: int = 0) -> np.ndarray:
        """:meth:`samples_per_s` for an int array of node counts, shape (k,) -> (k,).

        Raises:
            KeyError: unknown model or depth.
            ValueError: a count is negative or above the largest measured count.
        """
        counts, rates, _ = self._curve(model, spb_depth)
        if len(nodes) and (nodes.min() < 0 or nodes.max() > counts[-1]):
            raise ValueError(
                f"node counts {nodes.min()}..{nodes.max()} leave the measured range "
                f"0..{counts[-1]} of model {model!r}"
            )
        return np.interp(nodes, counts, rates)

    def best_progress_per_node_s(self, model: str) -> float:
        """Full-backprop progress per node-second of ``model`` at its best: the largest
        samples_per_s x progress_per_sample / nodes over its counts >= 1 and its depths
        (depth 0 and the measured ones; derived rows do not count), samples/s.

        Raises:
            KeyError: ``model`` is not in the table.
        """
        self.depths(model)  # KeyError naming an unknown model
        return self._best_progress[model]

    def efficient_nodes(self, model: str, min_efficiency: float) -> int:
        """Largest node count at which ``model`` keeps a parallel efficiency of at least
        ``min_efficiency``: the largest n in 1..its largest measured count with
        ``max_d r(n, d) * progress_per_sample(d) / n >= min_efficiency *``
        :meth:`best_progress_per_node_s` (depth 0 and the measured depths; counts between
        measured ones interpolated), nodes. 1 when no count qualifies; its largest count when
        ``min_efficiency`` is 0.

        On the Summit table at 0.9: AlexNet 2, mnasnet1 2, shufflenet 2, mobilenet 8,
        resnet18 19, DenseNet 64, vgg16 64 (``imagenet-scalability.csv``).

        Raises:
            KeyError: ``model`` is not in the table.
            ValueError: ``min_efficiency`` outside [0, 1].
        """
        if not 0.0 <= min_efficiency <= 1.0:
            raise ValueError(f"min_efficiency must be in [0, 1], got {min_efficiency}")
        key = (model, min_efficiency)
        if key not in self._efficient:
            self._efficient[key] = self._efficient_nodes(model, min_efficiency)
        return self._efficient[key]

    @cached_property
    def _efficient(self) -> dict[tuple[str, float], int]:
        return {}

    def _efficient_nodes(self, model: str, min_efficiency: float) -> int:
        best = self.best_progress_per_node_s(model)
        depths = [d for d in self.depths(model) if d == 0 or self.measured(model, d)]
        counts = np.arange(1, max(self.max_nodes(model, d) for d in depths) + 1)
        per_node = np.zeros(len(counts))
        for depth in depths:
            upto = counts[: self.max_nodes(model, depth)]
            rates = self.samples_per_s_array(model, upto, depth)
            progress = rates * self.progress_per_sample(model, depth) / upto
            per_node[: len(upto)] = np.maximum(per_node[: len(upto)], progress)
        keeps = np.flatnonzero(per_node >= min_efficiency * best * (1 - 1e-12))
        return int(keeps[-1]) + 1 if len(keeps) else 1

    @cached_property
    def _best_progress(self) -> dict[str, float]:
        best: dict[str, float] = {}
        for (model, depth), (counts, rates, progress) in self._curves.items():
            if depth > 0 and not self.measured(model, depth):
                continue
            used = counts > 0
            rate = float(np.max(rates[used] * progress / counts[used]))
            best[model] = max(best.get(model, 0.0), rate)
        return best

    def progress_per_sample(self, model: str, spb_depth: int = 0) -> float:
        """Samples of full-backprop progress one sample at ``spb_depth`` is worth, in (0, 1]."""
        return self._curve(model, spb_depth)[2]

    def _curve(self, model: str, spb_depth: int) -> tuple[np.ndarray, np.ndarray, float]:
        try:
            return self._curves[(model, spb_depth)]
        except KeyError:
            raise KeyError(
                f"model {model!r} at spb_depth {spb_depth} is not in the scalability table"
            ) from None

    @classmethod
    def from_csv(cls, text: str) -> ScalabilityTable:
        """Parse the CSV layout of ``shared/data/bftrainer/imagenet-scalability.csv``.

        Columns ``model,nodes,samples_per_s`` are required; ``spb_depth``,
        ``progress_per_sample`` and ``derived`` (``true``/``false``) are optional (default 0,
        1 and false); other columns are ignored.

        Raises:
            ValueError: a missing column, a malformed line or a bad value, naming the line.
        """
        reader = csv.DictReader(io.StringIO(text, newline=""))  # "\r" ends a line too
        try:
            fieldnames, rows = reader.fieldnames, list(reader)
        except csv.Error as exc:  # e.g. a field over csv.field_size_limit(), on the line
            # after the ones read
            raise ValueError(f"scalability table line {reader.line_num + 1}: {exc}") from None
        missing = {"model", "nodes", "samples_per_s"} - set(fieldnames or ())
        if missing:
            raise ValueError(f"scalability table: missing column(s) {', '.join(sorted(missing))}")
        points = []
        for line, row in enumerate(rows, start=2):
            if None in (row["model"], row["nodes"], row["samples_per_s"]):
                raise ValueError(f"scalability table line {line}: too few fields")
            try:
                points.append(
                    ScalabilityPoint(
                        model=row["model"],
                        nodes=int(row["nodes"]),
                        samples_per_s=float(row["samples_per_s"]),
                        spb_depth=int(row.get("spb_depth") or 0),
                        progress_per_sample=float(row.get("progress_per_sample") or 1.0),
                        derived=_flag(row.get("derived") or "false"),
                    )
                )
            except ValueError as exc:
                first = str(exc).splitlines()[0]
                raise ValueError(f"scalability table line {line}: {first}") from None
        if not points:
            raise ValueError("scalability table: no rows")
        return cls(points=tuple(points))


def _flag(text: str) -> bool:
    """``true``/``false`` (any case) as a bool.

    Raises:
        ValueError: anything else.
    """
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"derived must be true or false, got {text!r}")
    return value == "true"


class Job(BaseModel):
    """An elastic training job as the optimizer sees it at one event.

    Attributes:
        job_id: unique id.
        model: a model of the scalability table, or any name when ``rates`` is set.
        min_nodes: fewest nodes it can run on (it gets 0 or min_nodes..max_nodes).
        max_nodes: most nodes it can use.
        nodes: names of the idle nodes it holds now (reclaimed ones already removed).
        spb_depth: SPB depth it runs at now.
        spb_depths: depths it may be given; ``None`` means every depth measured for its
            model. A job whose workers accept only depth 0 (plain data parallel, SplitBrain)
            passes ``(0,)``; a job running at a depth outside them is moved
            to one of them (or stopped) by the next allocation.
        priority: multiplier of its term in the objective (raised to ``Weights.priority``),
            > 0.
        samples_remaining: samples of full-backprop progress still to train; goodput over the
            horizon is capped here.
        rescale_up_s: seconds of lost progress when it grows (or starts).
        rescale_down_s: seconds of lost progress when it shrinks, or changes SPB depth at
            the same count.
        reclaim_loss_s: seconds of progress a reclaim under the grace period costs it beyond
            ``rescale_down_s`` (the work since its last checkpoint where the grace period is
            too short to checkpoint); with forecasts it makes a planned shrink before a
            forecast reclaim pay (coefficient (h) of the formulation). Default 0.
        submitted_s: when it was submitted, seconds on any clock the problem's jobs share
            (e.g. the Unix epoch); only differences between jobs are read, by the completion
            term (i) (``Weights.completion_s``).
        rates: the job's own throughput curve (e.g.
            :func:`interstice.optimizer.learning.fit_curve` of what it reported, or
            :func:`~interstice.optimizer.learning.default_curve`), used instead of the
            table's rows for its model; the points' ``model`` names are not read. ``None``:
            the table's rows.
        user: who the job belongs to (its owner), the unit of the fairness term (d): the
            jobs of one user share one log2(1 + nodes) (``Problem.user_share``). ``None``
            (the default): a user of its own.
    """

    model_config = Frozen

    job_id: str = Field(min_length=1)
    model: str = Field(min_length=1)
    min_nodes: int = Field(ge=1)
    max_nodes: int = Field(ge=1)
    nodes: tuple[str, ...] = ()
    spb_depth: int = Field(default=0, ge=0)
    spb_depths: tuple[int, ...] | None = None
    priority: float = Field(default=1.0, gt=0)
    samples_remaining: float = Field(ge=0)
    rescale_up_s: float = Field(default=0.0, ge=0)
    rescale_down_s: float = Field(default=0.0, ge=0)
    reclaim_loss_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    submitted_s: float = Field(default=0.0, allow_inf_nan=False)
    rates: tuple[ScalabilityPoint, ...] | None = None
    user: str | None = Field(default=None, min_length=1)

    @cached_property
    def own_table(self) -> ScalabilityTable | None:
        """``rates`` as a table of this job's ``model``; ``None`` without rates."""
        if self.rates is None:
            return None
        points = tuple(p.model_copy(update={"model": self.model}) for p in self.rates)
        return ScalabilityTable(points=points)

    @model_validator(mode="after")
    def _bounds(self) -> Job:
        if self.min_nodes > self.max_nodes:
            raise ValueError(
                f"job {self.job_id!r}: min_nodes {self.min_nodes} > max_nodes {self.max_nodes}"
            )
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"job {self.job_id!r}: a node is listed twice in nodes")
        if self.spb_depths is not None and not self.spb_depths:
            raise ValueError(f"job {self.job_id!r}: spb_depths is empty (None allows every depth)")
        if self.rates is not None:
            try:
                self.own_table  # noqa: B018 (validates the curve once, then cached)
            except ValueError as exc:
                first = str(exc).splitlines()[1].strip() if "\n" in str(exc) else str(exc)
                raise ValueError(f"job {self.job_id!r}: rates: {first}") from None
        return self


class Weights(BaseModel):
    """Admin-tunable weights of the objective.

    Every term is in samples (eqs. (a)-(g) of :mod:`interstice.optimizer.formulation`), with
    u = the job's one-node samples/s x the horizon, what one node earns it over the horizon;
    ``node_seconds`` (the default) or ``speedup`` rescale each job's whole term (eq. (f));
    ``Weights(node_seconds=False)`` is plain throughput in samples.

    The default is node_seconds because it harvested more of the idle node time than raw
    samples in the replayed 48-hour windows (docs/engine.md, "Objective default";
    ``bench/replay_windows.py --objective throughput`` against the default).

    Attributes:
        throughput: weight of goodput (samples over the forecast horizon) and of the
            early-finish term (g).
        speedup: divide each job's term by its one-node rate (the "speedup" variant of
            BFTrainer's admin-defined metrics, arXiv 2106.12091), so small and large models
            weigh alike.
        node_seconds: divide each job's term by its model's best progress per node-second
            (:meth:`ScalabilityTable.best_progress_per_node_s`), so goodput counts in
            dedicated node-seconds of work: the replay's ``harvest``, comparable across
            models, so a slow model's node is worth as much as a fast one's. The default;
            ``speedup=True`` alone turns it off (both set explicitly is an error).
        fairness: weight of the concave share term u x log2(1 + nodes), per user: the jobs
            of one ``Job.user`` share one term over their nodes together (term (d)).
        priority: exponent on each job's ``priority`` multiplier (0 ignores priorities).
        churn: penalty per rescale (a start, stop, resize or depth change), in units of u:
            0.1 prices a rescale at a tenth of one node's work over the horizon.
        early_finish: beta of term (g), in [0, 1]: the weight of the samples an option would
            train beyond the job's ``samples_remaining`` within the horizon, i.e. the value of
            the node time it frees by finishing early; 0 = the bare cap of (a), 1 = no cap
            (BFTrainer's MILP). 0.9 trained the most on the 24 h replay (formulation docstring).
        completion_s: tau of the completion term (i), seconds, >= 0: a job submitted tau
            seconds after another weighs 1/e as much (``Job.submitted_s``), so where nodes
            are scarce the earlier jobs finish first; 0 turns it off. The default is chosen
            in the formulation docstring, term (i).
    """

    model_config = Frozen

    throughput: float = Field(default=1.0, ge=0)
    speedup: bool = False
    node_seconds: bool = True
    fairness: float = Field(default=0.0, ge=0)
    priority: float = Field(default=1.0, ge=0)
    churn: float = Field(default=0.0, ge=0)
    early_finish: float = Field(default=0.9, ge=0, le=1)
    completion_s: float = Field(default=COMPLETION_S, ge=0, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _speedup_replaces_the_default(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("speedup") and "node_seconds" not in data:
            return {**data, "node_seconds": False}
        return data

    @model_validator(mode="after")
    def _one_normalisation(self) -> Weights:
        if self.speedup and self.node_seconds:
            raise ValueError("speedup and node_seconds exclude each other: choose one")
        return self


class Problem(BaseModel):
    """One allocation decision: the idle pool, the jobs, the table, the objective.

    Attributes:
        idle_nodes: names of every node available to elastic jobs now, held ones included.
        jobs: the admitted jobs.
        scalability: the throughput table.
        weights: objective weights.
        horizon_s: forecast horizon H, seconds, > 0.
        time_limit_s: solver wall-clock limit, seconds, > 0.
        relative_gap: the solver stops once its answer is proven within this fraction of the
            optimum, (bound - value) / bound <= relative_gap, in [0, 1); 0 (the default)
            asks for a proof of optimality. Gurobi's and CPLEX's default MIP gap is 1e-4.
        idle_forecast_s: seconds each idle node is forecast to stay idle from now (the batch
            scheduler's ``until`` minus now), >= 0, for the nodes whose end is known; a node
            not listed is unknown and counts as staying through the horizon (H being the
            ``auto`` estimate where used). ``None`` (the default) or empty: no forecasts,
            and every answer is the one without them. How a forecast enters the model:
            coefficient (h) and constraints (3) of :mod:`interstice.optimizer.formulation`.
        forecast_classes: the most classes K of nodes forecast to leave within the horizon,
            >= 1 (:func:`interstice.optimizer.forecast.node_lives`); the options and the
            solvers' branching grow with K. The default 1 values every node forecast to
            leave within the horizon at the shortest life among them: the 192-node replay's
            solves stay within 50 ms at p99 (up to 10 s with K = 6), see
            :mod:`interstice.optimizer.formulation`, "Cost, honestly".
        forecast_coverage: the share of the newest ended idle holes whose end had been
            forecast, in [0, 1] (:func:`interstice.optimizer.coverage.forecast_coverage`);
            ``None`` (the default): unknown.
        forecast_min_coverage: the forecasts are used only while ``forecast_coverage`` is
            unknown or at least this, in [0, 1] (default 0.9; 0: always): below it every
            answer is the one without them (:mod:`interstice.optimizer.coverage` says why).
    """

    model_config = Frozen

    idle_nodes: tuple[str, ...]
    jobs: tuple[Job, ...]
    scalability: ScalabilityTable
    weights: Weights = Weights()
    horizon_s: float = Field(gt=0)
    time_limit_s: float = Field(default=10.0, gt=0)
    relative_gap: float = Field(default=0.0, ge=0, lt=1)
    idle_forecast_s: dict[str, float] | None = None
    forecast_classes: int = Field(default=FORECAST_CLASSES, ge=1)
    forecast_coverage: float | None = Field(default=None, ge=0, le=1)
    forecast_min_coverage: float = Field(default=FORECAST_MIN_COVERAGE, ge=0, le=1)

    @property
    def forecasts_used(self) -> bool:
        """Whether the forecasts enter the model: some are given and the coverage is
        unknown or at least ``forecast_min_coverage``."""
        return bool(self.idle_forecast_s) and (
            self.forecast_coverage is None or self.forecast_coverage >= self.forecast_min_coverage
        )

    @cached_property
    def lives(self) -> NodeLives | None:
        """The idle nodes' classes by forecast life; ``None`` without forecasts, or where
        they are not used (:attr:`forecasts_used`)."""
        if not self.forecasts_used:
            return None
        return node_lives(
            self.idle_nodes, self.idle_forecast_s, self.horizon_s, self.forecast_classes
        )

    @model_validator(mode="after")
    def _consistent(self) -> Problem:
        if len(set(self.idle_nodes)) != len(self.idle_nodes):
            raise ValueError("idle_nodes: a node is listed twice")
        for node, left_s in (self.idle_forecast_s or {}).items():
            if node not in self.idle_nodes:
                raise ValueError(f"idle_forecast_s: node {node!r} is not idle")
            if not 0 <= left_s < math.inf:
                raise ValueError(
                    f"idle_forecast_s: node {node!r} has {left_s} s left; give a finite "
                    "number >= 0 (leave an unknown end out)"
                )
        ids = [j.job_id for j in self.jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("jobs: a job_id is listed twice")
        idle = set(self.idle_nodes)
        holder: dict[str, str] = {}
        for job in self.jobs:
            if job.rates is None and job.model not in self.scalability.models:
                raise ValueError(
                    f"job {job.job_id!r}: model {job.model!r} is not in the scalability table "
                    "and the job has no rates"
                )
            measured = set(self.table_of(job).depths(job.model))
            if job.spb_depth not in measured:
                raise ValueError(
                    f"job {job.job_id!r}: spb_depth {job.spb_depth} is not measured for "
                    f"model {job.model!r}"
                )
            unmeasured = set(job.spb_depths or ()) - measured
            if unmeasured:
                raise ValueError(
                    f"job {job.job_id!r}: spb_depths {sorted(unmeasured)} are not measured for "
                    f"model {job.model!r}"
                )
            if not self.depths_of(job):
                raise ValueError(
                    f"job {job.job_id!r}: every depth it may run at has derived (not measured) "
                    "rates"
                )
            for node in job.nodes:
                if node not in idle:
                    raise ValueError(f"job {job.job_id!r}: holds node {node!r} that is not idle")
                if node in holder:
                    raise ValueError(
                        f"node {node!r} is held by both job {holder[node]!r} and {job.job_id!r}"
                    )
                holder[node] = job.job_id
        return self

    @cached_property
    def first_submitted_s(self) -> float:
        """The earliest ``Job.submitted_s`` of the problem's jobs (0 without jobs)."""
        return min((job.submitted_s for job in self.jobs), default=0.0)

    def completion_tilt(self, job: Job) -> float:
        """Term (i) of the formulation: max(exp(-(s_j - s_0) / tau), ``MIN_TILT``), in (0, 1],
        with s_j the job's ``submitted_s``, s_0 the earliest of the problem's jobs and tau
        ``Weights.completion_s`` (1 for every job when tau is 0)."""
        tau_s = self.weights.completion_s
        if tau_s == 0:
            return 1.0
        return max(math.exp(-(job.submitted_s - self.first_submitted_s) / tau_s), MIN_TILT)

    @cached_property
    def user_jobs(self) -> tuple[tuple[int, ...], ...]:
        """The jobs (indices into ``jobs``) of each user with two or more of them, by the
        user's first job: the users whose fairness term (d) couples jobs. A job whose
        ``user`` is ``None`` or alone is its own user, with (d) in its own options."""
        by_user: dict[str, list[int]] = {}
        for j, job in enumerate(self.jobs):
            if job.user is not None:
                by_user.setdefault(job.user, []).append(j)
        return tuple(tuple(jobs) for jobs in by_user.values() if len(jobs) > 1)

    @cached_property
    def _shared(self) -> frozenset[str]:
        return frozenset(self.jobs[jobs[0]].user for jobs in self.user_jobs)

    def own_share(self, job: Job) -> bool:
        """Whether ``job``'s fairness term (d) counts its own nodes alone: its user has no
        other job here (or it has none)."""
        return job.user not in self._shared

    @cached_property
    def user_units(self) -> np.ndarray:
        """w_f * ū_U of (d) per user of :attr:`user_jobs`, shape (U,), objective units:
        ū_U is the mean over the user's jobs of what one node over the horizon is worth
        to each (:func:`interstice.optimizer.objective.share_unit`), so a user with one
        job has that job's coefficient, as when (d) was per job."""
        units = []
        for jobs in self.user_jobs:
            each = [self.jobs[j] for j in jobs]
            units.append(
                np.mean([
                    share_unit(job, self.table_of(job), self.weights, self.horizon_s,
                               self.completion_tilt(job))
                    for job in each
                ])
            )  # fmt: skip
        return self.weights.fairness * np.array(units, dtype=float)

    def user_share(self, counts: Sequence[int]) -> float:
        """The fairness term (d) of the users with several jobs: sum_U w_f ū_U
        log2(1 + N_U), N_U the nodes of the user's jobs (formulation, (d) and (4)-(5)).

        Args:
            counts: nodes per job, in the problem's order.

        Returns:
            The term, objective units (0 when ``weights.fairness`` is 0 or no user has two
            jobs: then (d) is all in the jobs' own options).
        """
        if self.weights.fairness == 0 or not self.user_jobs:
            return 0.0
        totals = np.array([sum(counts[j] for j in jobs) for jobs in self.user_jobs])
        return float(self.user_units @ np.log2(1.0 + totals))

    def table_of(self, job: Job) -> ScalabilityTable:
        """The rates the optimizer uses for ``job``: its own ``rates``, else the table."""
        return job.own_table or self.scalability

    def depths_of(self, job: Job) -> tuple[int, ...]:
        """The SPB depths ``job`` may be given: ``job.spb_depths`` (or every depth of its
        curve), less the depths > 0 whose rates are derived rather than measured."""
        table = self.table_of(job)
        allowed = job.spb_depths or table.depths(job.model)
        return tuple(sorted(d for d in allowed if d == 0 or table.measured(job.model, d)))

    def max_count(self, job: Job, spb_depth: int) -> int:
        """Most nodes ``job`` may get at ``spb_depth``: its ``max_nodes``, capped by its
        curve's largest measured count (no extrapolation) and by the idle pool's size."""
        return min(
            job.max_nodes,
            self.table_of(job).max_nodes(job.model, spb_depth),
            len(self.idle_nodes),
        )

    def evaluate(self, allocation: Allocation) -> float:
        """Check ``allocation`` against this problem and recompute its objective.

        Checks, per job in the problem's order: the count is 0 or within min_nodes..
        :meth:`max_count`; the depth is one of :meth:`depths_of` (or the current one at
        count 0); the node names number ``node_count``, are idle, are nobody else's, and are
        a superset or a subset of the nodes the job holds (nothing migrates); the reported
        samples/s, goodput and rescale flag match the scalability table (and, with
        ``idle_forecast_s``, the forecast lives of the very nodes named: :meth:`score`).
        Capacity, and with forecasts constraints (3), follow from the names being distinct
        idle nodes.

        Args:
            allocation: an answer to this problem, from any backend or policy.

        Returns:
            The objective value (formulation's objective, weighted samples): the jobs'
            terms, plus the fairness term (d) of each user with several jobs on their nodes
            together (:meth:`user_share`).

        Raises:
            ValueError: the allocation is infeasible or inconsistent, naming the job.
        """
        if [a.job_id for a in allocation.jobs] != [j.job_id for j in self.jobs]:
            raise ValueError("allocation: jobs differ from the problem's jobs or their order")
        idle = set(self.idle_nodes)
        taken: set[str] = set()
        total = 0.0
        for job, share in zip(self.jobs, allocation.jobs, strict=True):
            where = f"job {job.job_id!r}"
            names = set(share.node_names)
            if len(names) != len(share.node_names) or len(names) != share.node_count:
                raise ValueError(f"{where}: node_names do not name node_count distinct nodes")
            if not names <= idle:
                raise ValueError(f"{where}: gets nodes that are not idle: {sorted(names - idle)}")
            if names & taken:
                raise ValueError(f"{where}: gets nodes another job has: {sorted(names & taken)}")
            taken |= names
            held = set(job.nodes)
            if not (names <= held or held <= names):
                raise ValueError(f"{where}: its nodes would migrate (neither subset nor superset)")
            count, depth = share.node_count, share.spb_depth
            if count == 0:
                if depth != job.spb_depth and depth not in self.depths_of(job):
                    raise ValueError(f"{where}: spb_depth {depth} is not allowed")
            else:
                if depth not in self.depths_of(job):
                    raise ValueError(f"{where}: spb_depth {depth} is not allowed")
                if not job.min_nodes <= count <= self.max_count(job, depth):
                    raise ValueError(
                        f"{where}: node_count {count} is outside "
                        f"{job.min_nodes}..{self.max_count(job, depth)}"
                    )
            rate, goodput, rescaled, value = self.score(job, share.node_names, depth)
            if not (
                np.isclose(rate, share.samples_per_s)
                and np.isclose(goodput, share.goodput)
                and rescaled == share.rescaled
            ):
                raise ValueError(f"{where}: samples_per_s, goodput or rescaled is misreported")
            total += value
        return total + self.user_share([share.node_count for share in allocation.jobs])

    def score(
        self, job: Job, node_names: Sequence[str], spb_depth: int
    ) -> tuple[float, float, bool, float]:
        """What ``job`` earns on ``node_names`` at ``spb_depth``: the objective's terms of
        that one answer (the same computation as the options', so they cannot disagree).

        With forecasts (coefficient (h) of the formulation) the nodes matter, not only
        their count: the job keeps the held ones among ``node_names``, and its new ones
        count at the life of the shortest-lived of them (the level of the new nodes).

        Returns:
            ``(samples_per_s, goodput, rescaled, value)``: samples/s, samples of progress
            over the horizon, whether it is a rescale, and its term in the objective
            (without (d) where its user has other jobs: that is :meth:`user_share`'s).
        """
        count = np.array([len(node_names)])
        table, lives = self.table_of(job), self.lives
        if lives is None or not lives.classes:
            s = score_options(
                job, count, (spb_depth,), table, self.weights, self.horizon_s,
                self.completion_tilt(job), self.own_share(job),
            )  # fmt: skip
            return (
                float(s.samples_per_s[0, 0]),
                float(s.goodput[0, 0]),
                bool(s.rescaled[0, 0]),
                float(s.value[0, 0]),
            )
        names = set(node_names)
        kept = [node for node in job.nodes if node in names]
        released = [node for node in job.nodes if node not in names]
        new = sorted(names - set(job.nodes))
        keep_order = lives.keep_order(kept) + lives.keep_order(released)
        level = int(lives.classes_of(new).min()) if new else lives.classes + 1
        s = score_forecast_options(
            job,
            count,
            (spb_depth,),
            table,
            self.weights,
            self.horizon_s,
            lives.life_s,
            lives.classes_of(keep_order),
            self.completion_tilt(job),
            self.own_share(job),
        )
        at = (0, 0, level - 1)
        return (
            float(s.samples_per_s[at]),
            float(s.goodput[at]),
            bool(s.rescaled[at]),
            float(s.value[at]),
        )


class JobAllocation(BaseModel):
    """One job's share of an allocation.

    Attributes:
        job_id: the job.
        node_count: nodes it gets (0, or within min_nodes..max_nodes).
        node_names: which ones, sorted; a superset or a subset of the nodes it held.
        spb_depth: SPB depth to run at.
        samples_per_s: expected throughput at that count and depth, samples/s.
        goodput: expected full-backprop progress over the horizon, samples.
        rescaled: whether its count or depth changed.
    """

    model_config = Frozen

    job_id: str
    node_count: int = Field(ge=0)
    node_names: tuple[str, ...]
    spb_depth: int = Field(ge=0)
    samples_per_s: float = Field(ge=0)
    goodput: float = Field(ge=0)
    rescaled: bool


class Allocation(BaseModel):
    """The optimizer's answer.

    Attributes:
        status: ``optimal``, ``feasible`` or ``fallback`` (see :data:`SolveStatus`).
        objective: objective value of this allocation (what :meth:`Problem.evaluate` returns).
        backend: the solver that ran (``cbc``, ``cpsat``), else what decided: ``greedy``
            (the policy; the MILP's answer when the greedy proved it optimal, termination
            ``lp-integral``, or within ``Problem.relative_gap``, termination ``within-gap``;
            or its fallback, status ``fallback``), ``equal_share``, or
            ``none`` (nothing to decide: termination ``trivial``).
        solve_time_s: wall-clock seconds, model building included.
        horizon_s: forecast horizon used, seconds.
        jobs: one entry per job of the problem, in the problem's order.
        termination: the solver's own termination reason (e.g. CBC ``Optimal``, CP-SAT
            ``FEASIBLE``), or ``trivial`` / the policy's name where no solver ran.
    """

    model_config = Frozen

    status: SolveStatus
    objective: float
    backend: str
    solve_time_s: float = Field(ge=0)
    horizon_s: float = Field(gt=0)
    jobs: tuple[JobAllocation, ...]
    termination: str = ""
