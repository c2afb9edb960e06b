// The dashboard's shell: the token (typed once, kept in the tab's session storage), the
// tabs (one view per URL hash) and the polling of the shown view every 2 s.

import { ApiError, get, saveToken, savedToken } from "./api.js";
import * as agents from "./views/agents.js";
import * as harvest from "./views/harvest.js";
import * as jobs from "./views/jobs.js";
import * as nodes from "./views/nodes.js";
import * as optimizer from "./views/optimizer.js";

const POLL_MS = 2000;
const VIEWS = { nodes, jobs, harvest, optimizer, agents };
const mounted = {};
let timer = null;
let generation = 0;

const status = (text, cls = "") => {
  const node = document.getElementById("status");
  node.textContent = text;
  node.className = cls;
};

function current() {
  const name = location.hash.slice(1);
  return name in VIEWS ? name : "nodes";
}

async function refresh(run) {
  const name = current();
  if (!savedToken()) return;
  const started = performance.now();
  try {
    await get("/v1/jobs?limit=1"); // every role that may use the page can read this
    await mounted[name].refresh();
    // how long the refresh took, up to the frame that shows it (read by bench/dashboard.py)
    requestAnimationFrame(() => performance.measure(`interstice:refresh:${name}`, { start: started }));
    if (run === generation) status(`updated ${new Date().toLocaleTimeString()}`, "ok");
  } catch (error) {
    if (run !== generation) return;
    if (error instanceof ApiError && error.status === 401) status("token refused (401): type another", "error");
    else if (error instanceof ApiError && error.status === 403) status("this token's role cannot use the dashboard", "error");
    else status(`service unreachable: ${error.message}`, "error");
  }
}

function schedule() {
  clearTimeout(timer);
  const run = ++generation;
  const loop = async () => {
    await refresh(run);
    if (run === generation) timer = setTimeout(loop, POLL_MS);
  };
  loop();
}

function show() {
  const name = current();
  const hasToken = Boolean(savedToken());
  document.getElementById("need-token").hidden = hasToken;
  for (const [view, module] of Object.entries(VIEWS)) {
    const section = document.getElementById(`view-${view}`);
    section.hidden = !hasToken || view !== name;
    if (!section.hidden && !mounted[view]) mounted[view] = module.mount(section);
  }
  for (const link of document.querySelectorAll("#tabs a")) {
    link.classList.toggle("active", link.dataset.view === name);
  }
  if (hasToken) schedule();
  else status("no token", "error");
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("token");
  saveToken(input.value.trim());
  input.value = "";
  for (const view of Object.keys(mounted)) {
    document.getElementById(`view-${view}`).replaceChildren();
    delete mounted[view];
  }
  show();
});
document.getElementById("forget").addEventListener("click", () => {
  saveToken(null);
  show();
});
addEventListener("hashchange", show);
show();
