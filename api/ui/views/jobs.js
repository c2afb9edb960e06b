// Jobs view: a Gantt of the listed jobs that held nodes (one lane per job: a bar while it
// holds nodes, its node count and SPB depth in the legend, rescale and preemption marks),
// their node count over time, the jobs a page at a time with their progress (samples, rate,
// loss, ETA), searched by user, state and name on the service (GET
// /v1/jobs?user=&state=&name=, limit and offset), and the queue's longest waiting jobs.
// GET /v1/jobs answers a user's own jobs and an admin's all: the view shows what it gets.

import { get } from "../api.js";
import { Chart, chartBox, stepped } from "../charts.js";
import { count, duration, el, failure, fill, jobColor, num, panel, table, time } from "../fmt.js";
import { clampOffset, pager } from "../pager.js";

const SHOWN = 12; // jobs in the charts: the newest of the page that held nodes
const PAGE = 25; // jobs per page of the table
const QUEUE_SHOWN = 10; // queued jobs shown: the longest waiting
const STATES = ["queued", "running", "finished", "cancelled", "failed"];
const PREEMPTIONS = new Set(["reclaim", "agent_lost", "agent_left"]);

// The search form: user, state and name; `onSearch()` runs when it changes.
function searchForm(onSearch) {
  const user = el("input", { name: "user", type: "search", placeholder: "user", "aria-label": "user" });
  const name = el("input", { name: "name", type: "search", placeholder: "model or program", "aria-label": "model or program" });
  const state = el(
    "select",
    { name: "state", "aria-label": "state" },
    el("option", { value: "", text: "any state" }),
    STATES.map((s) => el("option", { value: s, text: s })),
  );
  const clear = el("button", { type: "button", text: "Clear" });
  const form = el("form", { class: "job-search", id: "job-search", autocomplete: "off" }, user, state, name, el("button", { type: "submit", text: "Search" }), clear);
  // the search applied (what the fields held when it ran), as the list's query parameters
  let applied = new URLSearchParams();
  const apply = () => {
    applied = new URLSearchParams();
    for (const field of [user, state, name]) if (field.value.trim()) applied.set(field.name, field.value.trim());
    onSearch();
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    apply();
  });
  state.addEventListener("change", apply);
  clear.addEventListener("click", () => {
    form.reset();
    apply();
  });
  return { form, params: () => new URLSearchParams(applied) };
}

export function mount(section) {
  const gantt = panel("Jobs over time", "jobs-gantt");
  const progress = panel("Jobs", "jobs-table");
  const queue = panel("Queue", "jobs-queue");
  const ganttBox = chartBox("jobs-gantt");
  const nodesBox = chartBox("jobs-nodes");
  let offset = 0;
  const search = searchForm(() => {
    offset = 0;
    view.refresh();
  });
  const pages = pager("jobs", (to) => {
    offset = to;
    view.refresh();
  });
  section.replaceChildren(gantt, progress, queue);
  // the form and the pager stay put across refreshes (a field being typed in keeps focus)
  progress.querySelector(".body").before(search.form);
  progress.append(pages.element);
  const shown = { jobs: [] }; // the jobs of the lanes, bottom up
  const lanes = new Chart(ganttBox, {
    title: "Jobs: a bar while the job holds nodes (legend: nodes · SPB depth)",
    yLabel: "job",
    height: 240,
    scales: { x: { time: true }, y: { range: () => [0.3, Math.max(1, shown.jobs.length) + 0.7] } },
    yAxis: {
      splits: () => shown.jobs.map((_, i) => i + 1),
      values: () => shown.jobs.map((j) => j.job_id),
    },
  });
  const counts = new Chart(nodesBox, { title: "Nodes per job", yLabel: "nodes", height: 220 });
  let asked = 0; // the newest refresh: an older one's answer is dropped
  const view = {
    async refresh() {
      const run = ++asked;
      const query = search.params();
      query.set("limit", PAGE);
      query.set("offset", offset);
      let answer;
      let queued;
      try {
        [answer, queued] = await Promise.all([get(`/v1/jobs?${query}`), longestWaiting()]);
      } catch (error) {
        if (run === asked) for (const p of [gantt, progress, queue]) fill(p, failure(error));
        return;
      }
      if (answer.data.length === 0 && answer.count > 0 && offset > 0) {
        offset = clampOffset(offset, PAGE, answer.count); // the list shrank under this page
        return view.refresh();
      }
      const jobs = answer.data;
      const rates = await latestRates(jobs.filter((j) => j.state === "running"));
      if (run !== asked) return;
      if (!gantt.contains(ganttBox)) fill(gantt, ganttBox, nodesBox);
      // lanes for the page's jobs that held nodes (a queued job's lane stays empty)
      const held = jobs.filter((j) => j.rescales.length);
      shown.jobs = (held.length ? held : jobs).slice(0, SHOWN).reverse();
      drawTimeline(lanes, counts, shown.jobs);
      pages.update(offset, PAGE, answer.count);
      fill(progress, jobsTable(jobs, rates));
      fill(queue, queueTable(queued.data), queued.count > queued.data.length
        ? el("p", { class: "note", text: `the ${QUEUE_SHOWN} longest waiting of ${count(queued.count)} queued jobs` })
        : null);
    },
  };
  return view;
}

// The queued jobs that waited longest (the list is newest first: its last page) and how
// many are queued.
async function longestWaiting() {
  const newest = await get(`/v1/jobs?state=queued&limit=${QUEUE_SHOWN}`);
  if (newest.count <= QUEUE_SHOWN) return newest;
  return get(`/v1/jobs?state=queued&limit=${QUEUE_SHOWN}&offset=${newest.count - QUEUE_SHOWN}`);
}

// The newest reported samples/s of each job (GET /v1/jobs/{id}/metrics?limit=1).
async function latestRates(jobs) {
  const answers = await Promise.allSettled(
    jobs.map((j) => get(`/v1/jobs/${j.job_id}/metrics?limit=1`)),
  );
  const rates = {};
  answers.forEach((a, i) => {
    const last = a.status === "fulfilled" ? a.value.data.at(-1) : null;
    if (last && last.samples_per_s) rates[jobs[i].job_id] = last.samples_per_s;
  });
  return rates;
}

// Each job's (time s, nodes, depth) steps: 0 nodes from submission, then every rescale.
function steps(job) {
  const out = [[new Date(job.submitted_at).getTime() / 1000, 0, job.spb_depth, null]];
  for (const r of job.rescales) {
    out.push([new Date(r.at).getTime() / 1000, r.to_nodes.length, r.to_spb_depth, r.reason]);
  }
  return out;
}

function drawTimeline(lanes, counts, jobs) {
  const now = Date.now() / 1000;
  const perJob = jobs.map(steps);
  // each change time, and 1 ms after it, where a bar that ended there is already gone
  const changes = perJob.flat().map((s) => s[0]);
  const xs = [...new Set([...changes, ...changes.map((t) => t + 0.001), now])].sort((a, b) => a - b);
  const at = (s, x) => {
    let found = null;
    for (const step of s) if (step[0] <= x) found = step;
    return found;
  };
  const nodes = perJob.map((s) => xs.map((x) => at(s, x)?.[1] ?? null));
  const depth = perJob.map((s) => xs.map((x) => at(s, x)?.[2] ?? null));
  // a lane's bar: while the job holds nodes, up to the instant it holds none (a stepped
  // path draws each step up to the next point, so that point must not be null)
  const lane = (i, n) => n.map((count, k) => (count || (k > 0 && n[k - 1]) ? i + 1 : null));
  const marks = (i, test) =>
    xs.map((x) => (perJob[i].some((s) => s[0] === x && s[3] && test(s[3])) ? i + 1 : null));
  const ganttSeries = jobs.map((job, i) => ({
    label: job.job_id,
    stroke: jobColor(job.job_id),
    width: 14,
    paths: stepped(),
    points: { show: false },
    value: (u, v, si, di) => (di === null || di === undefined ? "—" : `${nodes[i][di] ?? 0} nodes · SPB ${depth[i][di] ?? 0}`),
  }));
  // one series of marks per kind: at a lane's height where one of its jobs rescaled
  const markSeries = (label, color, test) => {
    const perLane = jobs.map((_, i) => marks(i, test));
    return {
      series: {
        label,
        stroke: color,
        width: 1,
        paths: () => null,
        points: { show: true, size: 10, fill: color, stroke: color },
        value: (u, v) => (v ? jobs[v - 1].job_id : "—"),
      },
      column: xs.map((_, k) => perLane.map((m) => m[k]).find((m) => m) ?? null),
    };
  };
  const rescale = markSeries("rescale", "#333", (reason) => reason === "allocation");
  const preempt = markSeries("preemption (reclaim, agent lost)", "#d62728", (reason) => PREEMPTIONS.has(reason));
  lanes.update(
    [...ganttSeries, rescale.series, preempt.series],
    [xs, ...jobs.map((_, i) => lane(i, nodes[i])), rescale.column, preempt.column],
  );
  counts.update(
    jobs.map((job) => ({
      label: `${job.job_id} (nodes)`,
      stroke: jobColor(job.job_id),
      width: 2,
      paths: stepped(),
      points: { show: false },
    })),
    [xs, ...nodes],
  );
}

// What the job trains: its model, else its program (a command's script, the entrypoint):
// `python /home/u/train.py` shows as train.py.
const INTERPRETER = /^python[\d.]*$/;
const script = (command) =>
  (INTERPRETER.test(command[0].split("/").pop()) && command[1] ? command[1] : command[0]).split("/").pop();
const program = (j) => j.model || (j.command?.length ? script(j.command) : j.entrypoint) || "—";

function jobsTable(jobs, rates) {
  const eta = (job) => {
    const rate = rates[job.job_id];
    return job.state === "running" && rate ? duration((job.total_samples - job.samples_done) / rate) : "—";
  };
  const bar = (job) => {
    const share = Math.min(1, job.samples_done / job.total_samples);
    return el(
      "div",
      { class: "progress", title: `${job.samples_done} of ${job.total_samples} samples` },
      el("div", { class: "done", style: `width:${(100 * share).toFixed(1)}%;background:${jobColor(job.job_id)}` }),
      el("span", { text: `${count(job.samples_done)} / ${count(job.total_samples)}` }),
    );
  };
  const rows = jobs.map((job) => ({ ...job, __attrs: { "data-job": job.job_id, class: `state-${job.state}` } }));
  return table(
    [
      ["job", (j) => j.job_id],
      ["user", (j) => j.user],
      ["state", (j) => el("span", { class: `badge ${j.state}`, text: j.state, title: j.error || "" })],
      ["model or program", program],
      ["nodes (min–max)", (j) => `${j.world_size} (${j.min_nodes}–${j.max_nodes})`],
      ["SPB depth", (j) => j.spb_depth],
      ["samples done", bar],
      ["rate (samples/s)", (j) => num(rates[j.job_id] ?? null, 1)],
      ["last loss", (j) => num(j.last_loss, 4)],
      ["ETA", eta],
      ["rescales", (j) => j.rescales.filter((r) => r.from_nodes.length && r.to_nodes.length).length],
      ["submitted", (j) => time(j.submitted_at)],
    ],
    rows,
    { class: "jobs" },
  );
}

function queueTable(queued) {
  const now = Date.now();
  const rows = [...queued].sort((a, b) => a.job_id.localeCompare(b.job_id, undefined, { numeric: true }));
  return table(
    [
      ["job", (j) => j.job_id],
      ["user", (j) => j.user],
      ["model or program", program],
      ["nodes wanted", (j) => `${j.min_nodes}–${j.max_nodes}`],
      ["priority", (j) => num(j.priority)],
      ["submitted", (j) => time(j.submitted_at)],
      ["waiting", (j) => duration((now - new Date(j.submitted_at).getTime()) / 1000)],
    ],
    rows,
    { class: "queue" },
  );
}
