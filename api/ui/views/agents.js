// Agents view: each node agent's health (state, time since its last heartbeat) and what
// its workers report (job, world size, step, samples/s, loss), from GET /v1/agents: a page
// of them at a time, found by agent, node, host, state or job. Admins only.

import { get } from "../api.js";
import { ago, el, failure, fill, num, panel, searchBox, table, time } from "../fmt.js";
import { clampOffset, pager } from "../pager.js";

const PAGE = 50; // agents per page

export function mount(section) {
  const list = panel("Agents", "agents-table");
  const search = searchBox(list, "agents-search", "agent, node, host, state or job");
  section.replaceChildren(list);
  let offset = 0;
  let agents = null;
  const render = () => {
    const text = search.value.trim();
    const shown = text ? agents.filter((a) => matches(a, text)) : agents;
    offset = clampOffset(offset, PAGE, shown.length);
    pages.update(offset, PAGE, shown.length);
    fill(list, summary(agents), agentsTable(shown.slice(offset, offset + PAGE)));
  };
  const pages = pager("agents", (to) => {
    offset = to;
    render();
  });
  list.append(pages.element); // stays put across refreshes
  search.addEventListener("input", () => {
    offset = 0;
    if (agents) render();
  });
  return {
    async refresh() {
      try {
        agents = (await get("/v1/agents")).data;
        render();
      } catch (error) {
        fill(list, failure(error));
      }
    },
  };
}

const matches = (agent, text) =>
  [agent.agent_id, agent.node, agent.host, agent.state, agent.report?.job_id].some((v) => v && v.includes(text));

function summary(agents) {
  const by = (state) => agents.filter((a) => a.state === state).length;
  return el("p", {
    class: "note",
    text:
      `${agents.length} agents: ${by("alive")} alive, ${by("lost")} lost, ${by("left")} left. ` +
      "Job to loss: the newest report of the node's workers; workers not running: they are starting, " +
      "or the generation that report comes from ended (rescaled, reclaimed, finished).",
  });
}

// Whether the node's workers run now (the report's job_state), else that generation's end
// (finished, failed) or "not running" (starting, or stopped by a rescale or reclaim).
function workers(agent) {
  const report = agent.report || {};
  if (!report.job_id) return "—";
  if (report.job_state === "running") return el("span", { class: "badge running", text: "running" });
  return el("span", { class: "badge", text: report.job_state || "not running" });
}

function agentsTable(agents) {
  const report = (a, key) => (a.report ? a.report[key] : null);
  return table(
    [
      ["agent", (a) => a.agent_id],
      ["node", (a) => a.node],
      ["host", (a) => a.host],
      ["health", (a) => el("span", { class: `badge ${a.state}`, text: a.state })],
      ["last heartbeat", (a) => el("span", {}, ago(a.last_heartbeat_at), " · ", time(a.last_heartbeat_at))],
      ["job", (a) => report(a, "job_id") || "—"],
      ["workers", workers],
      ["world size (nodes)", (a) => report(a, "world_size") ?? "—"],
      ["step", (a) => report(a, "step") ?? "—"],
      ["samples/s", (a) => num(report(a, "samples_per_s"), 1)],
      ["loss", (a) => num(report(a, "loss"), 4)],
      ["devices", (a) => a.devices.length || "CPU"],
    ],
    agents.map((a) => ({ ...a, __attrs: { "data-agent": a.agent_id, class: `state-${a.state}` } })),
    { class: "agents" },
  );
}
