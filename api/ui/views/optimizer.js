// Optimizer view: each applied solve (GET /v1/solves: time, status, objective, solve time,
// rescales), the objective's weights (GET /v1/objective, changed through PUT
// /v1/objective: the same validation and audit as any client) and the audit log (GET
// /v1/audit). Admins only.

import { call, get } from "../api.js";
import { Chart, chartBox } from "../charts.js";
import { el, failure, fill, num, panel, table, time } from "../fmt.js";

const SOLVES_SHOWN = 15;
const SOLVES_NOTE =
  "Backend greedy with status optimal: the greedy allocation solved the LP relaxation with whole numbers, " +
  "so it is optimal and the MILP backend set below was not needed (termination within-gap: proven within " +
  "the relative gap); greedy with status fallback: the " +
  "backend found no answer in the time limit. Rescales: jobs whose node count or SPB depth the solve changed.";
// The objective's fields: [name, input type, help]
const FIELDS = [
  ["throughput", "number", "weight of the goodput term"],
  ["node_seconds", "checkbox", "count goodput in dedicated node-seconds (harvest)"],
  ["speedup", "checkbox", "count goodput as speedup over one node"],
  ["fairness", "number", "weight of the fairness term"],
  ["priority", "number", "exponent of job priorities"],
  ["churn", "number", "penalty per rescale"],
  ["early_finish", "number", "beta of the early-finish term, 0..1"],
  ["completion_s", "number", "tau of the completion term, seconds (0: off)"],
  ["reclaim_loss_s", "number", "what a reclaim costs a job beyond a shrink, seconds"],
  ["forecast_classes", "number", "classes of nodes forecast to leave within the horizon, 1..16"],
  ["forecast_min_coverage", "number", "use forecasts only while this share of ended holes (under 50: of idle nodes) had one, 0..1"],
  ["horizon_s", "text", "forecast horizon, seconds, or auto"],
  ["backend", "select", "MILP backend"],
  ["time_limit_s", "number", "solver time limit, seconds"],
  ["relative_gap", "number", "stop within this fraction of the optimum, 0..1 (0: prove optimal)"],
];

export function mount(section) {
  const solves = panel("Solves", "optimizer-solves");
  const weights = panel("Objective", "optimizer-objective");
  const audit = panel("Audit log", "optimizer-audit");
  const timeBox = chartBox("solve-time");
  const objectiveBox = chartBox("solve-objective");
  section.replaceChildren(solves, weights, audit);
  const charts = {
    time: new Chart(timeBox, { title: "Solve time per solve", yLabel: "solve time (ms)", height: 200 }),
    objective: new Chart(objectiveBox, {
      title: "Objective and rescales per solve",
      yLabel: "objective",
      y2Label: "rescales (jobs)",
      height: 220,
      scales: {
        x: { time: true },
        y: { auto: true },
        y2: { range: (u, lo, hi) => [0, Math.max(1, hi) + 0.5] },
      },
    }),
  };
  const form = objectiveForm(() => refreshAudit(audit));
  return {
    async refresh() {
      const [answer, objective] = await Promise.allSettled([get("/v1/solves?limit=200"), get("/v1/objective")]);
      if (answer.status === "rejected") fill(solves, failure(answer.reason));
      else {
        if (!solves.contains(timeBox)) {
          fill(
            solves,
            el("div", { class: "pair" }, timeBox, objectiveBox),
            el("div", { class: "solves-table" }),
            el("p", { class: "note", text: SOLVES_NOTE }),
          );
        }
        drawSolves(charts, answer.value.data);
        solves.querySelector(".solves-table").replaceChildren(solvesTable(answer.value.data.slice(0, SOLVES_SHOWN)));
      }
      if (objective.status === "rejected") fill(weights, failure(objective.reason));
      else {
        if (!weights.contains(form.node)) fill(weights, form.node);
        form.show(objective.value);
      }
      await refreshAudit(audit);
    },
  };
}

async function refreshAudit(audit) {
  try {
    const answer = await get("/v1/audit?limit=20");
    fill(audit, auditTable(answer.data));
  } catch (error) {
    fill(audit, failure(error));
  }
}

function drawSolves(charts, solves) {
  const ordered = [...solves].reverse();
  const xs = ordered.map((s) => new Date(s.at).getTime() / 1000);
  charts.time.update(
    [{ label: "solve time (ms)", stroke: "#1f77b4", width: 2, points: { show: true, size: 6 } }],
    [xs, ordered.map((s) => 1000 * s.solve_time_s)],
  );
  charts.objective.update(
    [
      { label: "objective", stroke: "#2ca02c", width: 2, points: { show: true, size: 6 } },
      {
        label: "rescales (jobs)",
        stroke: "#ff7f0e",
        fill: "#ff7f0e88",
        scale: "y2",
        paths: uPlot.paths.bars({ size: [0.6, 12] }),
        points: { show: false },
      },
    ],
    [xs, ordered.map((s) => s.objective), ordered.map((s) => s.rescales)],
  );
}

function solvesTable(solves) {
  return table(
    [
      ["time", (s) => time(s.at)],
      ["status", (s) => el("span", { class: `badge ${s.status}`, text: s.status })],
      ["backend", (s) => s.backend],
      ["objective", (s) => num(s.objective, 4)],
      ["solve time (ms)", (s) => num(1000 * s.solve_time_s, 2)],
      ["horizon (s)", (s) => num(s.horizon_s, 0)],
      ["rescales", (s) => s.rescales],
      ["allocation", (s) => s.jobs.map((j) => `${j.job_id}: ${j.node_count} n, SPB ${j.spb_depth}`).join("; ") || "—"],
    ],
    solves.map((s) => ({ ...s, __attrs: { "data-solve": s.id } })),
    { class: "solves" },
  );
}

function auditTable(entries) {
  const changed = (a) =>
    Object.keys(a.new)
      .filter((k) => JSON.stringify(a.old?.[k]) !== JSON.stringify(a.new[k]))
      .map((k) => `${k}: ${JSON.stringify(a.old?.[k] ?? null)} → ${JSON.stringify(a.new[k])}`)
      .join("; ");
  return table(
    [
      ["time", (a) => time(a.at)],
      ["who", (a) => a.actor],
      ["action", (a) => a.action],
      ["change", (a) => changed(a) || "—"],
    ],
    entries.map((a) => ({ ...a, __attrs: { "data-audit": a.id } })),
    { class: "audit" },
  );
}

// The weights form: shows the current objective until the admin edits it, then PUTs the
// fields changed and shows the service's answer (its 422 names the field at fault).
function objectiveForm(afterSave) {
  const inputs = {};
  const message = el("p", { class: "form-message", role: "status" });
  let shown = null;
  let dirty = false;
  const rows = FIELDS.map(([name, type, help]) => {
    let input;
    if (type === "select") {
      input = el("select", { name }, ["cpsat", "cbc"].map((b) => el("option", { value: b, text: b })));
    } else {
      input = el("input", { name, type, step: type === "number" ? "any" : undefined });
    }
    for (const kind of ["input", "change"]) input.addEventListener(kind, () => (dirty = true));
    inputs[name] = input;
    return el("label", { class: "field" }, el("span", { text: name }), input, el("small", { text: help }));
  });
  // what the admin typed; text that is no number goes as it is, for the service to refuse
  const read = (name) => {
    const input = inputs[name];
    if (input.type === "checkbox") return input.checked;
    const text = input.value.trim();
    if (input.type === "number" || name === "horizon_s") {
      return text !== "" && Number.isFinite(Number(text)) ? Number(text) : text;
    }
    return text;
  };
  const node = el(
    "form",
    {
      class: "objective",
      onsubmit: async (event) => {
        event.preventDefault();
        const changes = {};
        for (const [name] of FIELDS) {
          const value = read(name);
          if (JSON.stringify(value) !== JSON.stringify(shown[name])) changes[name] = value;
        }
        if (!Object.keys(changes).length) {
          message.textContent = "nothing changed";
          return;
        }
        try {
          const saved = await call("PUT", "/v1/objective", changes);
          dirty = false;
          show(saved);
          message.className = "form-message ok";
          message.textContent = `saved: ${Object.keys(changes).join(", ")}`;
          await afterSave();
        } catch (error) {
          message.className = "form-message error";
          message.textContent = `refused: ${error.detail ?? error.message}`;
        }
      },
    },
    el("div", { class: "fields" }, rows),
    el("button", { type: "submit", id: "objective-save", text: "Save weights" }),
    el("button", { type: "button", text: "Reset", onclick: () => { dirty = false; show(shown); message.textContent = ""; } }),
    message,
  );
  function show(objective) {
    if (dirty) return;
    shown = objective;
    for (const [name] of FIELDS) {
      const input = inputs[name];
      if (input.type === "checkbox") input.checked = Boolean(objective[name]);
      else input.value = objective[name];
    }
  }
  return { node, show };
}
