// Formatting and small DOM helpers shared by the views: times in the browser's zone with
// UTC on hover, numbers with units, tables, the "admins only" notice.

import { ApiError } from "./api.js";

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    // through the CSSOM: the page's Content-Security-Policy refuses style attributes
    else if (key === "style") node.style.cssText = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const utc = (date) => date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");

// A <time> in the browser's zone, its UTC value in the tooltip.
export function time(iso) {
  if (!iso) return el("span", { class: "muted", text: "—" });
  const date = new Date(iso);
  return el("time", { datetime: date.toISOString(), title: utc(date), text: date.toLocaleString() });
}

// "12 s", "4.2 min", "3.1 h".
export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  if (seconds < 90) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  if (seconds < 5400) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

export function ago(iso) {
  return iso ? duration((Date.now() - new Date(iso).getTime()) / 1000) + " ago" : "never";
}

export function num(value, digits = 2) {
  if (value === null || value === undefined) return "—";
  if (!Number.isFinite(value)) return String(value);
  return Math.abs(value) >= 1e5 || (value !== 0 && Math.abs(value) < 1e-3)
    ? value.toExponential(digits)
    : value.toLocaleString(undefined, { maximumFractionDigits: digits });
}

// A count: an integer with thousands separators.
export const count = (value) => (value === null || value === undefined ? "—" : Math.round(value).toLocaleString());

export const percent = (ratio) => (ratio === null || ratio === undefined ? "—" : `${(100 * ratio).toFixed(1)} %`);

// A table: `columns` are [header, cell(row)] pairs; a cell returns text or a node.
export function table(columns, rows, attrs = {}) {
  return el(
    "table",
    attrs,
    el("thead", {}, el("tr", {}, columns.map(([header]) => el("th", { text: header })))),
    el(
      "tbody",
      {},
      rows.length
        ? rows.map((row) => el("tr", row.__attrs || {}, columns.map(([, cell]) => el("td", {}, cell(row)))))
        : el("tr", {}, el("td", { colspan: columns.length, class: "muted", text: "none" })),
    ),
  );
}

// A panel's body for an error: 403 (the token's role may not read it) says "admins only".
export function failure(error) {
  if (error instanceof ApiError && error.status === 403) {
    return el("p", { class: "denied", text: "admins only" });
  }
  return el("p", { class: "error", text: error instanceof ApiError ? error.message : String(error) });
}

// Replace the content of `panel` (keeping its heading) with `nodes`.
export function fill(panel, ...nodes) {
  panel.querySelector(".body").replaceChildren(...nodes.flat());
}

export function panel(title, id) {
  return el("div", { class: "panel", id }, el("h2", { text: title }), el("div", { class: "body" }));
}

// A search box in `panel`'s heading: outside the panel's body, so it keeps its text and
// focus across refreshes.
export function searchBox(panel, id, placeholder) {
  const input = el("input", { id, type: "search", placeholder, "aria-label": placeholder });
  panel.querySelector("h2").append(" ", input);
  return input;
}

// Stable colours per job id (also used by the node grid).
// (no green, grey or red: those mean idle, busy and reclaimed)
const PALETTE = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#393b79"];
export function jobColor(jobId) {
  const n = Number(String(jobId).replace(/^j-/, "")) || 0;
  return PALETTE[n % PALETTE.length];
}
