// Harvest view: idle vs harvested node-hours, utilization and harvest ratio over the last
// hour, the last day and the service's lifetime (GET /v1/stats), and each user's node-hours
// and samples over the lifetime (GET /v1/usage, summed over its days). Admins only.

import { get, sinceAgo } from "../api.js";
import { Chart, chartBox } from "../charts.js";
import { count, duration, el, failure, fill, num, panel, percent, table } from "../fmt.js";

const WINDOWS = [
  ["last hour", 3600],
  ["last day", 86400],
  ["lifetime", null],
];

// The usage rows (one per user and UTC day) summed per user, by user name.
function perUser(rows) {
  const users = new Map();
  for (const row of rows) {
    const sum = users.get(row.user) || { user: row.user, node_hours: 0, samples: 0, days: 0 };
    sum.node_hours += row.node_hours;
    sum.samples += row.samples;
    sum.days += 1;
    users.set(row.user, sum);
  }
  return [...users.values()].map((sum) => ({ ...sum, __attrs: { "data-user": sum.user } }));
}

export function mount(section) {
  const chartPanel = panel("Idle vs harvested node-hours", "harvest-chart");
  const tablePanel = panel("Harvest", "harvest-table");
  const userPanel = panel("Harvest per user (lifetime)", "harvest-users");
  const box = chartBox("harvest");
  section.replaceChildren(chartPanel, tablePanel, userPanel);
  const chart = new Chart(box, {
    title: "Idle and harvested node-hours per window",
    yLabel: "node-hours",
    height: 260,
    x: { label: "window", value: (u, i) => WINDOWS[i]?.[0] ?? "—" },
    xAxis: { splits: () => [0, 1, 2], values: () => WINDOWS.map(([name]) => name) },
    scales: { x: { time: false, range: [-0.5, 2.5] }, y: { range: (u, lo, hi) => [0, Math.max(0.01, hi * 1.15)] } },
  });
  return {
    async refresh() {
      let stats, usage;
      try {
        [usage, ...stats] = await Promise.all([
          get("/v1/usage"),
          ...WINDOWS.map(([, s]) => get(s === null ? "/v1/stats" : `/v1/stats?since=${encodeURIComponent(sinceAgo(s))}`)),
        ]);
      } catch (error) {
        fill(chartPanel, failure(error));
        fill(tablePanel, failure(error));
        fill(userPanel, failure(error));
        return;
      }
      fill(
        userPanel,
        table(
          [
            ["user", (r) => r.user],
            ["node-hours", (r) => num(r.node_hours, 3)],
            ["samples", (r) => count(r.samples)],
            ["days with harvest (UTC)", (r) => r.days],
          ],
          perUser(usage.data),
          { class: "users" },
        ),
      );
      if (!chartPanel.contains(box)) fill(chartPanel, box);
      const bars = (offset) => uPlot.paths.bars({ size: [0.3, 80], align: offset });
      chart.update(
        [
          { label: "idle (node-hours)", stroke: "#2ca02c", fill: "#2ca02c99", paths: bars(-1), points: { show: false } },
          { label: "harvested (node-hours)", stroke: "#1f77b4", fill: "#1f77b499", paths: bars(1), points: { show: false } },
        ],
        [[0, 1, 2], stats.map((s) => s.idle_node_hours), stats.map((s) => s.harvested_node_hours)],
      );
      fill(
        tablePanel,
        table(
          [
            ["window", (r) => r.name],
            ["idle node-hours", (r) => num(r.idle_node_hours, 3)],
            ["harvested node-hours", (r) => num(r.harvested_node_hours, 3)],
            ["utilization (harvested ÷ idle)", (r) => percent(r.utilization)],
            ["harvest (work ÷ idle)", (r) => percent(r.harvest)],
            ["jobs finished", (r) => r.jobs_finished],
            ["mean completion time", (r) => duration(r.jct_mean_s)],
            ["mean wait for a first node", (r) => duration(r.wait_mean_s)],
          ],
          stats.map((s, i) => ({ ...s, name: WINDOWS[i][0], __attrs: { "data-window": WINDOWS[i][0] } })),
          { class: "harvest" },
        ),
        el(
          "p",
          { class: "note" },
          "Harvest counts each job's samples in dedicated-node seconds (samples ÷ the job's best per-node rate), divided by the idle node-seconds.",
        ),
      );
    },
  };
}
