// The node map: every node as a small cell on one canvas, nodes grouped by cabinet (a block
// per cabinet, its name above it), coloured by kind, a dot on stale ones. One canvas
// whatever the number of nodes: 4,734 nodes draw in a few milliseconds and add no element
// to the page. Hovering a cell names its node; clicking selects it (the drill-down).

import { el, jobColor } from "./fmt.js";
import { isStale, nodeKind } from "./groups.js";

const CELL = 7; // px, one node
const STEP = CELL + 1;
const LABEL_H = 12; // px, the cabinet's name above its block
const BLOCK_GAP = 10; // px between blocks
const PAD = 4;
export const COLORS = {
  idle: "#2ca02c",
  "idle-no-agent": "#98c99a",
  busy: "#8a8f96",
  quarantined: "#222222",
};

export class NodeMap {
  // `onSelect(node)` runs when a cell is clicked; `element` is the map to place.
  constructor(onSelect) {
    this.canvas = el("canvas", { class: "node-map", role: "img", "aria-label": "node map" });
    this.tip = el("div", { class: "map-tip", hidden: "" });
    this.element = el("div", { class: "map-box" }, this.canvas, this.tip);
    this.cells = []; // [x, y, node] of each drawn cell, for the hit test
    this.groups = [];
    this.selected = { group: null, node: null };
    this.canvas.addEventListener("mousemove", (event) => this.hover(event));
    this.canvas.addEventListener("mouseleave", () => (this.tip.hidden = true));
    this.canvas.addEventListener("click", (event) => {
      const node = this.at(event);
      if (node) onSelect(node);
    });
    addEventListener("resize", () => this.draw(this.groups, this.selected));
  }

  // Lay out and paint `groups` (groupNodes' answer), outlining the selected group and node.
  draw(groups, selected) {
    this.groups = groups;
    this.selected = selected;
    const width = Math.max(300, this.element.clientWidth || 300);
    const largest = Math.max(1, ...groups.map((g) => g.nodes.length));
    // blocks about twice as wide as tall: Summit's 18 nodes a cabinet make 6 × 3
    const columns = Math.max(1, Math.min(Math.ceil(Math.sqrt(2 * largest)), Math.floor((width - 2 * PAD) / STEP)));
    const blockW = columns * STEP;
    const blockH = LABEL_H + Math.ceil(largest / columns) * STEP;
    const perRow = Math.max(1, Math.floor((width - 2 * PAD + BLOCK_GAP) / (blockW + BLOCK_GAP)));
    const rows = Math.ceil(groups.length / perRow);
    const height = Math.max(STEP, 2 * PAD + rows * (blockH + BLOCK_GAP));
    const ratio = devicePixelRatio || 1;
    this.canvas.width = Math.round(width * ratio);
    this.canvas.height = Math.round(height * ratio);
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    const ctx = this.canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "9px system-ui, sans-serif";
    ctx.textBaseline = "top";
    this.cells = [];
    groups.forEach((group, g) => {
      const left = PAD + (g % perRow) * (blockW + BLOCK_GAP);
      const top = PAD + Math.floor(g / perRow) * (blockH + BLOCK_GAP);
      ctx.fillStyle = group.name === selected.group ? "#1d2228" : "#6b7580";
      ctx.fillText(group.name, left, top, blockW + BLOCK_GAP - 2);
      if (group.name === selected.group) {
        ctx.strokeStyle = "#1f77b4";
        ctx.lineWidth = 2;
        ctx.strokeRect(left - 2, top + LABEL_H - 2, blockW + 3, blockH - LABEL_H + 3);
      }
      group.nodes.forEach((node, i) => {
        const x = left + (i % columns) * STEP;
        const y = top + LABEL_H + Math.floor(i / columns) * STEP;
        const kind = nodeKind(node);
        ctx.fillStyle = kind === "allocated" ? jobColor(node.holder) : COLORS[kind];
        ctx.fillRect(x, y, CELL, CELL);
        if (isStale(node)) {
          ctx.fillStyle = kind === "quarantined" ? "#fff" : "#000";
          ctx.fillRect(x + 2, y + 2, CELL - 4, CELL - 4);
        }
        if (node.name === selected.node) {
          ctx.strokeStyle = "#d62728";
          ctx.lineWidth = 2;
          ctx.strokeRect(x - 1, y - 1, CELL + 2, CELL + 2);
        }
        this.cells.push([x, y, node]);
      });
    });
    this.canvas.dataset.nodes = String(this.cells.length);
    this.canvas.dataset.groups = String(groups.length);
  }

  // The node under the pointer of `event`, or null.
  at(event) {
    const box = this.canvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const y = event.clientY - box.top;
    const hit = this.cells.find(([cx, cy]) => x >= cx && x < cx + STEP && y >= cy && y < cy + STEP);
    return hit ? hit[2] : null;
  }

  hover(event) {
    const node = this.at(event);
    this.tip.hidden = !node;
    if (!node) return;
    const kind = nodeKind(node);
    this.tip.textContent = `${node.name}: ${node.holder ? `held by ${node.holder}` : kind}${isStale(node) ? " · stale" : ""}`;
    const box = this.element.getBoundingClientRect();
    this.tip.style.left = `${event.clientX - box.left + 12}px`;
    this.tip.style.top = `${event.clientY - box.top + 12}px`;
  }
}
