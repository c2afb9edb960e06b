// Agents view: each node agent's health (state, time since its last heartbeat) and what
// its workers report (job, world size, step, samples/s, loss), from GET /v1/agents.
// Admins only.

import { get } from "../api.js";
import { ago, el, failure, fill, num, panel, table, time } from "../fmt.js";

export function mount(section) {
  const list = panel("Agents", "agents-table");
  section.replaceChildren(list);
  return {
    async refresh() {
      try {
        const answer = await get("/v1/agents");
        fill(list, summary(answer.data), agentsTable(answer.data));
      } catch (error) {
        fill(list, failure(error));
      }
    },
  };
}

function summary(agents) {
  const by = (state) => agents.filter((a) => a.state === state).length;
  return el("p", { class: "note", text: `${agents.length} agents: ${by("alive")} alive, ${by("lost")} lost, ${by("left")} left.` });
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
