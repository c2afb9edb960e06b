// Nodes view: idle, busy, allocated per job and alive agents over time (GET
// /v1/nodes/history) with the reclaims marked; every node on one map, grouped by cabinet
// (GET /v1/nodes, one page of up to 10,000; cabinets from the service's
// node_group_pattern, GET /ui/settings); the cabinets as a paged table, the chosen
// cabinet's nodes as tiles, the chosen node's details (the drill-down); and the idle nodes
// the scheduler has said it wants back (their `until`, "wanted back"). The page holds a
// bounded number of elements whatever the number of nodes. Admins (and the scheduler) only.

import { get, getAll, sinceAgo } from "../api.js";
import { Chart, chartBox, stepped } from "../charts.js";
import { count, el, failure, fill, jobColor, panel, searchBox, table, time } from "../fmt.js";
import { groupNodes, grouping, isStale, nodeKind } from "../groups.js";
import { NodeMap } from "../nodemap.js";
import { clampOffset, pager } from "../pager.js";

const LEGEND_NOTE =
  "Idle: nodes the scheduler lent (the jobs' included); busy: the scheduler's own; red points: nodes reclaimed from a job.";
const WINDOWS_S = { "15 min": 900, "1 h": 3600, "6 h": 21600, "24 h": 86400 };
const NODES_PAGE = 10000; // GET /v1/nodes's largest page: Summit's 4,734 nodes in one request
const GROUPS_SHOWN = 12; // cabinets per page of the table
const TILES_SHOWN = 48; // nodes per page of the chosen cabinet
const WANTED_SHOWN = 10; // nodes of the "wanted back" table, soonest first
const JOBS_CHARTED = 8; // jobs with their own line in the chart; the others are summed
// The chart spans 15 min to 24 h: its history is asked for every 10 s, not at every refresh
// (on a large machine it is the refresh's heaviest request).
const HISTORY_EVERY_MS = 10000;
const KINDS = [
  ["allocated", "held by a job (its colour)"],
  ["idle", "idle, agent alive: allocatable"],
  ["idle-no-agent", "idle, no alive agent"],
  ["busy", "busy: the scheduler's"],
  ["quarantined", "quarantined: no job is placed on it"],
];

export function mount(section) {
  const select = el(
    "select",
    { id: "nodes-window", "aria-label": "time window" },
    Object.keys(WINDOWS_S).map((label) => el("option", { value: WINDOWS_S[label], text: `last ${label}` })),
  );
  select.value = "3600";
  const summary = panel("Now", "nodes-summary");
  const history = panel("Nodes over time", "nodes-history");
  const mapPanel = panel("Node map (by cabinet)", "nodes-map");
  const groupsPanel = panel("Cabinets", "nodes-groups");
  const groupPanel = panel("Cabinet", "nodes-group");
  const detailPanel = panel("Node", "nodes-detail");
  const wanted = panel("Wanted back by the scheduler", "nodes-wanted");
  const box = chartBox("nodes-over-time");
  history.querySelector("h2").append(" ", select);
  const search = searchBox(groupsPanel, "nodes-search", "cabinet or node name");
  section.replaceChildren(
    summary,
    mapPanel,
    el("div", { class: "pair" }, groupsPanel, el("div", {}, groupPanel, detailPanel)),
    history,
    wanted,
  );
  const chart = new Chart(box, { title: "Nodes over time", yLabel: "nodes" });
  const legend = el(
    "div",
    { class: "grid-legend" },
    KINDS.map(([kind, text]) => el("span", {}, el("i", { class: `node ${kind} swatch` }), text)),
    el("span", {}, el("i", { class: "node idle stale swatch" }), "stale: agent lost or left, or the forecast end passed"),
  );
  const patternNote = el("p", { class: "note" });
  const view = { group: null, node: null, groupOffset: 0, tileOffset: 0 };
  const data = { nodes: null, groups: [] };
  const settings = get("/ui/settings").catch(() => ({ node_group_pattern: null }));
  let groupOf = null;
  let historyAt = -Infinity; // when the chart's history was last asked for (ms)
  select.addEventListener("change", () => (historyAt = -Infinity));

  const pick = (node) => {
    view.node = node.name;
    const group = groupOf(node.name);
    if (group !== view.group) view.tileOffset = 0;
    view.group = group;
    render();
  };
  const map = new NodeMap(pick);
  const groupsPager = pager("groups", (offset) => {
    view.groupOffset = offset;
    render();
  });
  const tilesPager = pager("tiles", (offset) => {
    view.tileOffset = offset;
    render();
  });
  // the pagers stay put across refreshes (a button keeps focus)
  groupsPanel.append(groupsPager.element);
  groupPanel.append(tilesPager.element);
  search.addEventListener("input", () => {
    const text = search.value.trim();
    const exact = data.nodes?.find((n) => n.name === text);
    if (exact) pick(exact);
    view.groupOffset = 0;
    render();
  });

  // Draw the map, the cabinets and the chosen cabinet and node from `data` and `view`.
  function render() {
    if (!data.nodes) return;
    const shown = matching(data.groups, search.value.trim());
    if (!shown.some((g) => g.name === view.group)) {
      view.group = shown[0]?.name ?? null;
      view.tileOffset = 0;
    }
    if (!mapPanel.contains(map.element)) fill(mapPanel, map.element, legend, patternNote);
    map.draw(data.groups, view);
    view.groupOffset = clampOffset(view.groupOffset, GROUPS_SHOWN, shown.length);
    groupsPager.update(view.groupOffset, GROUPS_SHOWN, shown.length);
    fill(groupsPanel, groupsTable(shown.slice(view.groupOffset, view.groupOffset + GROUPS_SHOWN), view, (name) => {
      view.group = name;
      view.tileOffset = 0;
      render();
    }));
    const group = data.groups.find((g) => g.name === view.group);
    groupPanel.querySelector("h2").textContent = group ? `Cabinet ${group.name}` : "Cabinet";
    if (group) {
      view.tileOffset = clampOffset(view.tileOffset, TILES_SHOWN, group.nodes.length);
      tilesPager.update(view.tileOffset, TILES_SHOWN, group.nodes.length);
      const tiles = group.nodes.slice(view.tileOffset, view.tileOffset + TILES_SHOWN);
      fill(groupPanel, el("div", { class: "node-grid" }, tiles.map((n) => tile(n, view, pick))));
    } else {
      tilesPager.update(0, TILES_SHOWN, 0);
      fill(groupPanel, el("p", { class: "muted", text: "no cabinet matches" }));
    }
    const node = data.nodes.find((n) => n.name === view.node);
    fill(detailPanel, node ? nodeDetail(node, groupOf(node.name)) : el("p", { class: "note", text: "Click a node on the map or in its cabinet to see it here." }));
  }

  return {
    async refresh() {
      const charting = Date.now() - historyAt >= HISTORY_EVERY_MS;
      if (charting) historyAt = Date.now();
      const [now, past, configured] = await Promise.allSettled([
        getAll(`/v1/nodes?limit=${NODES_PAGE}`),
        charting ? get(`/v1/nodes/history?since=${encodeURIComponent(sinceAgo(Number(select.value)))}`) : null,
        settings,
      ]);
      if (!groupOf) {
        const rule = grouping(configured.value?.node_group_pattern);
        groupOf = rule.groupOf;
        patternNote.textContent = rule.error || "";
        patternNote.hidden = !rule.error;
      }
      if (now.status === "rejected") {
        for (const p of [summary, mapPanel, groupsPanel, groupPanel, detailPanel, wanted]) fill(p, failure(now.reason));
        data.nodes = null;
      } else {
        data.nodes = now.value;
        data.groups = groupNodes(now.value, groupOf);
        fill(summary, counts(now.value));
        render();
        fill(wanted, wantedBack(now.value));
      }
      if (!charting) return;
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

// The groups whose name holds `text`, or that hold a node whose name does.
function matching(groups, text) {
  if (!text) return groups;
  return groups.filter((g) => g.name.includes(text) || g.nodes.some((n) => n.name.includes(text)));
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
    ["stale (agent lost or left, forecast passed)", n(isStale)],
  ];
  // the service answers quarantine fields once it has quarantine: show the count then
  if (nodes.some((x) => "quarantined_at" in x)) items.push(["quarantined", n((x) => x.quarantined_at)]);
  return el(
    "div",
    { class: "cards" },
    items.map(([label, value]) =>
      el("div", { class: "card", "data-count": label.split(" ")[0] }, el("b", { text: count(value) }), el("span", { text: label })),
    ),
  );
}

function groupsTable(groups, view, onPick) {
  const rows = groups.map((g) => ({
    ...g,
    __attrs: {
      "data-group": g.name,
      class: g.name === view.group ? "selected pick" : "pick",
      onclick: () => onPick(g.name),
    },
  }));
  const c = (kind) => (g) => (g.counts[kind] ? count(g.counts[kind]) : el("span", { class: "muted", text: "0" }));
  return table(
    [
      ["cabinet", (g) => g.name],
      ["nodes", (g) => count(g.nodes.length)],
      ["allocated", c("allocated")],
      ["idle", c("idle")],
      ["idle, no agent", c("idle-no-agent")],
      ["busy", c("busy")],
      ["quarantined", c("quarantined")],
      ["stale", c("stale")],
    ],
    rows,
    { class: "groups" },
  );
}

function describe(node) {
  const agent = node.agent ? `${node.agent.agent_id} (${node.agent.state})` : "no agent";
  return `${node.name}: ${node.state} since ${new Date(node.since).toLocaleString()}${node.until ? `, wanted back ${new Date(node.until).toLocaleString()}` : ""}; agent ${agent}${node.holder ? `; held by ${node.holder}` : ""}${node.quarantined_at ? `; quarantined: ${node.quarantine_reason || "no reason given"}` : ""}`;
}

function tile(node, view, onPick) {
  const kind = nodeKind(node);
  const classes = ["node", kind, isStale(node) ? "stale" : "", node.name === view.node ? "selected" : ""];
  return el(
    "button",
    {
      type: "button",
      class: classes.filter(Boolean).join(" "),
      "data-node": node.name,
      style: kind === "allocated" ? `background:${jobColor(node.holder)}` : undefined,
      title: describe(node),
      onclick: () => onPick(node),
    },
    el("span", { class: "name", text: node.name }),
    el("span", { class: "holder", text: node.holder || kind }),
  );
}

// One node, every field the service answers for it.
function nodeDetail(node, group) {
  const agent = node.agent;
  const rows = [
    ["node", node.name],
    ["cabinet", group],
    ["shown as", el("span", { class: `badge ${nodeKind(node)}`, text: nodeKind(node) })],
    ["scheduler state", node.state],
    ["since", time(node.since)],
    ["wanted back", node.until ? (node.until_stale ? el("span", { class: "stale" }, time(node.until), " passed: end unknown") : time(node.until)) : "unknown"],
    ["agent", agent ? `${agent.agent_id} (${agent.state})` : "none"],
    ["allocatable", node.allocatable ? "yes" : "no"],
    ["held by", node.holder || "—"],
  ];
  if ("quarantined_at" in node) {
    rows.push(["quarantined", node.quarantined_at ? time(node.quarantined_at) : "no"]);
    if (node.quarantined_at) rows.push(["quarantine reason", node.quarantine_reason || "—"]);
  }
  if (isStale(node)) rows.push(["stale", el("span", { class: "stale", text: staleWhy(node) })]);
  return el(
    "table",
    { class: "node-detail", "data-node": node.name },
    el("tbody", {}, rows.map(([key, value]) => el("tr", { "data-field": key }, el("th", { text: key }), el("td", {}, value)))),
  );
}

function staleWhy(node) {
  const why = [];
  if (node.agent?.state === "lost") why.push("its agent stopped heartbeating (lost)");
  if (node.agent?.state === "left") why.push("its agent left");
  if (node.until_stale) why.push("the scheduler's forecast end has passed");
  return why.join("; ");
}

// The nodes with a forecast end (`until`), soonest first: the scheduler's plan for them.
function wantedBack(nodes) {
  const known = nodes.filter((n) => n.until).sort((a, b) => new Date(a.until) - new Date(b.until));
  const rows = known.slice(0, WANTED_SHOWN);
  return [
    table(
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
      rows.map((n) => Object.assign({ __attrs: { "data-node": n.name } }, n)),
      { class: "wanted-back" },
    ),
    known.length > rows.length
      ? el("p", { class: "note", text: `the ${WANTED_SHOWN} soonest of ${count(known.length)} nodes with a forecast end` })
      : null,
  ];
}

// The jobs with their own line: those that held the most nodes in the window.
function chartedJobs(points) {
  const most = new Map();
  for (const p of points) {
    for (const [job, n] of Object.entries(p.allocated)) most.set(job, Math.max(most.get(job) || 0, n));
  }
  const order = [...most.keys()].sort((a, b) => most.get(b) - most.get(a) || Number(a.slice(2)) - Number(b.slice(2)));
  return { jobs: order.slice(0, JOBS_CHARTED).sort((a, b) => Number(a.slice(2)) - Number(b.slice(2))), others: order.length > JOBS_CHARTED };
}

function draw(chart, history) {
  const points = history.data;
  const xs = points.map((p) => new Date(p.at).getTime() / 1000);
  const { jobs, others } = chartedJobs(points);
  const reclaimed = xs.map(() => null);
  for (const r of history.reclaims) {
    const t = new Date(r.at).getTime() / 1000;
    const i = xs.findIndex((x) => x >= t);
    if (i >= 0) reclaimed[i] = (reclaimed[i] || 0) + 1;
  }
  const line = (label, stroke, extra = {}) => ({ label, stroke, width: 2, paths: stepped(), points: { show: false }, ...extra });
  const series = [
    line("idle (nodes)", "#2ca02c"),
    line("busy (nodes)", "#7f7f7f"),
    line("alive agents", "#000", { width: 1, dash: [6, 4], spanGaps: false }),
    ...jobs.map((job) => line(`${job} (nodes)`, jobColor(job), { fill: `${jobColor(job)}33` })),
    ...(others ? [line("other jobs (nodes)", "#555", { width: 1, dash: [2, 3] })] : []),
    { label: "reclaimed (nodes)", stroke: "#d62728", width: 1, paths: () => null, points: { show: true, size: 9, fill: "#d62728" } },
  ];
  const charted = new Set(jobs);
  const rest = (p) => Object.entries(p.allocated).reduce((sum, [job, n]) => sum + (charted.has(job) ? 0 : n), 0);
  const data = [
    xs,
    points.map((p) => p.idle),
    points.map((p) => p.busy),
    points.map((p) => p.agents_alive),
    ...jobs.map((job) => points.map((p) => p.allocated[job] || 0)),
    ...(others ? [points.map(rest)] : []),
    reclaimed,
  ];
  chart.update(series, data);
}
