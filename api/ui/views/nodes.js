// Nodes view: idle, busy, allocated per job and alive agents over time (GET
// /v1/nodes/history) with the reclaims marked, the current allocation as a node grid
// (GET /v1/nodes, every page), and the idle nodes the scheduler has said it wants back
// (their `until`, "wanted back"). Admins (and the scheduler) only.

import { get, getAll, sinceAgo } from "../api.js";
import { Chart, chartBox, stepped } from "../charts.js";
import { el, failure, fill, jobColor, panel, table, time } from "../fmt.js";

const LEGEND_NOTE =
  "Idle: nodes the scheduler lent (the jobs' included); busy: the scheduler's own; red points: nodes reclaimed from a job.";
const WINDOWS_S = { "15 min": 900, "1 h": 3600, "6 h": 21600, "24 h": 86400 };

export function mount(section) {
  const select = el(
    "select",
    { id: "nodes-window", "aria-label": "time window" },
    Object.keys(WINDOWS_S).map((label) => el("option", { value: WINDOWS_S[label], text: `last ${label}` })),
  );
  select.value = "3600";
  const summary = panel("Now", "nodes-summary");
  const history = panel("Nodes over time", "nodes-history");
  const grid = panel("Current allocation", "nodes-grid");
  const wanted = panel("Wanted back by the scheduler", "nodes-wanted");
  const box = chartBox("nodes-over-time");
  history.querySelector("h2").append(" ", select);
  section.replaceChildren(summary, history, grid, wanted);
  const chart = new Chart(box, { title: "Nodes over time", yLabel: "nodes" });
  return {
    async refresh() {
      const [now, past] = await Promise.allSettled([
        getAll("/v1/nodes"),
        get(`/v1/nodes/history?since=${encodeURIComponent(sinceAgo(Number(select.value)))}`),
      ]);
      if (now.status === "rejected") {
        fill(summary, failure(now.reason));
        fill(grid, failure(now.reason));
        fill(wanted, failure(now.reason));
      } else {
        fill(summary, counts(now.value));
        fill(grid, nodeGrid(now.value));
        fill(wanted, wantedBack(now.value));
      }
      if (past.status === "rejected") fill(history, failure(past.reason));
      else {
        if (!history.contains(box)) fill(history, box, el("p", { class: "note", id: "agents-note" }));
        draw(chart, past.value);
        history.querySelector("#agents-note").textContent = past.value.agents_alive_since
          ? `Alive agents are counted since the service started (${new Date(past.value.agents_alive_since).toLocaleString()}); the rest comes from the database. ${LEGEND_NOTE}`
          : LEGEND_NOTE;
      }
    },
  };
}

function counts(nodes) {
  const n = (test) => nodes.filter(test).length;
  const items = [
    ["nodes", nodes.length],
    ["idle (lent by the scheduler)", n((x) => x.state === "idle")],
    ["allocated (held by jobs)", n((x) => x.holder)],
    ["free (idle, agent alive, no job)", n((x) => x.allocatable && !x.holder)],
    ["busy (scheduler's)", n((x) => x.state === "busy")],
    ["alive agents", n((x) => x.agent?.state === "alive")],
  ];
  return el(
    "div",
    { class: "cards" },
    items.map(([label, value]) =>
      el("div", { class: "card", "data-count": label.split(" ")[0] }, el("b", { text: value }), el("span", { text: label })),
    ),
  );
}

function nodeState(node) {
  if (node.holder) return "allocated";
  if (node.state === "busy") return "busy";
  return node.allocatable ? "idle" : "idle-no-agent";
}

function nodeGrid(nodes) {
  const cells = nodes.map((node) => {
    const kind = nodeState(node);
    const agent = node.agent ? `${node.agent.agent_id} (${node.agent.state})` : "no agent";
    return el(
      "div",
      {
        class: `node ${kind}`,
        "data-node": node.name,
        style: node.holder ? `background:${jobColor(node.holder)}` : undefined,
        title: `${node.name}: ${node.state} since ${new Date(node.since).toLocaleString()}${node.until ? `, wanted back ${new Date(node.until).toLocaleString()}` : ""}; agent ${agent}${node.holder ? `; held by ${node.holder}` : ""}`,
      },
      el("span", { class: "name", text: node.name }),
      el("span", { class: "holder", text: node.holder || kind }),
    );
  });
  const legend = el(
    "div",
    { class: "grid-legend" },
    [
      ["allocated", "held by a job (its colour)"],
      ["idle", "idle, agent alive: allocatable"],
      ["idle-no-agent", "idle, no alive agent"],
      ["busy", "busy: the scheduler's"],
    ].map(([kind, text]) => el("span", {}, el("i", { class: `node ${kind} swatch` }), text)),
  );
  return [el("div", { class: "node-grid" }, cells), legend];
}

// The nodes with a forecast end (`until`), soonest first: the scheduler's plan for them.
function wantedBack(nodes) {
  const known = nodes.filter((n) => n.until).sort((a, b) => new Date(a.until) - new Date(b.until));
  return table(
    [
      ["node", (n) => n.name],
      ["state", (n) => n.state],
      ["holder", (n) => n.holder || "—"],
      ["idle since", (n) => time(n.since)],
      // a passed `until` is stale: the optimizer reads the node's end as unknown
      ["wanted back", (n) => n.until_stale
        ? el("span", { class: "stale" }, time(n.until), " passed: end unknown")
        : time(n.until)],
    ],
    known.map((n) => Object.assign({ __attrs: { "data-node": n.name } }, n)),
    { class: "wanted-back" },
  );
}

function draw(chart, history) {
  const points = history.data;
  const xs = points.map((p) => new Date(p.at).getTime() / 1000);
  const jobs = [...new Set(points.flatMap((p) => Object.keys(p.allocated)))].sort(
    (a, b) => Number(a.slice(2)) - Number(b.slice(2)),
  );
  const reclaimed = xs.map(() => null);
  for (const r of history.reclaims) {
    const t = new Date(r.at).getTime() / 1000;
    const i = xs.findIndex((x) => x >= t);
    if (i >= 0) reclaimed[i] = (reclaimed[i] || 0) + 1;
  }
  const series = [
    { label: "idle (nodes)", stroke: "#2ca02c", width: 2, paths: stepped(), points: { show: false } },
    { label: "busy (nodes)", stroke: "#7f7f7f", width: 2, paths: stepped(), points: { show: false } },
    { label: "alive agents", stroke: "#000", width: 1, dash: [6, 4], paths: stepped(), spanGaps: false, points: { show: false } },
    ...jobs.map((job) => ({ label: `${job} (nodes)`, stroke: jobColor(job), fill: `${jobColor(job)}33`, width: 2, paths: stepped(), points: { show: false } })),
    { label: "reclaimed (nodes)", stroke: "#d62728", width: 1, paths: () => null, points: { show: true, size: 9, fill: "#d62728" } },
  ];
  const data = [
    xs,
    points.map((p) => p.idle),
    points.map((p) => p.busy),
    points.map((p) => p.agents_alive),
    ...jobs.map((job) => points.map((p) => p.allocated[job] || 0)),
    reclaimed,
  ];
  chart.update(series, data);
}
