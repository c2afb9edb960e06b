// Nodes by cabinet (or rack): the first group of the service's `node_group_pattern` (GET
// /ui/settings) searched in the node's name; a name it does not match belongs to the group
// of its name without its trailing number ("n3" → "n"). What each node shows on the map:
// its kind (one colour) and whether it is stale.

const TRAILING_NUMBER = /\d+$/;
const ORDER = new Intl.Collator(undefined, { numeric: true }).compare; // "n2" before "n10"

// The grouping function of `pattern` (a string); `error` says why the browser refused it
// (then every node falls back to the rule above).
export function grouping(pattern) {
  let regex = null;
  let error = null;
  try {
    regex = pattern ? new RegExp(pattern) : null;
  } catch (exc) {
    error = `node_group_pattern ${pattern} is not a JavaScript regular expression (${exc.message}): grouped by the name without its trailing number`;
  }
  const groupOf = (name) => {
    const match = regex?.exec(name);
    if (match && match[1]) return match[1];
    return name.replace(TRAILING_NUMBER, "") || name;
  };
  return { groupOf, error };
}

// What the map colours a node by: quarantined (the service keeps jobs off it) first, then
// held by a job, the scheduler's (busy), idle with an alive agent, idle without one.
export function nodeKind(node) {
  if (node.quarantined_at) return "quarantined";
  if (node.holder) return "allocated";
  if (node.state === "busy") return "busy";
  return node.allocatable ? "idle" : "idle-no-agent";
}

// Stale: what the service knows of the node is out of date: its agent stopped
// heartbeating (lost) or left, or the scheduler's forecast end (`until`) has passed.
export const isStale = (node) =>
  Boolean(node.until_stale) || node.agent?.state === "lost" || node.agent?.state === "left";

// The groups of `nodes` (each {name, nodes, counts}) in name order (numbers compared as
// numbers), their nodes in name order too.
export function groupNodes(nodes, groupOf) {
  const byName = new Map();
  for (const node of nodes) {
    const name = groupOf(node.name);
    if (!byName.has(name)) byName.set(name, []);
    byName.get(name).push(node);
  }
  return [...byName.keys()].sort(ORDER).map((name) => {
    const members = byName.get(name).sort((a, b) => ORDER(a.name, b.name));
    const counts = { allocated: 0, idle: 0, "idle-no-agent": 0, busy: 0, quarantined: 0, stale: 0 };
    for (const node of members) {
      counts[nodeKind(node)] += 1;
      if (isStale(node)) counts.stale += 1;
    }
    return { name, nodes: members, counts };
  });
}
