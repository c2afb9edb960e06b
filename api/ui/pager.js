// A pager for the long lists (jobs, cabinets, a cabinet's nodes, agents): "‹ previous",
// "1–25 of 2,000", "next ›". The list asks for one page at a time, so the page's size in
// the DOM stays the same whatever the list's length.

import { count, el } from "./fmt.js";

// `onChange(offset)` runs when a button asks for another page.
export function pager(name, onChange) {
  let state = { offset: 0, limit: 1, total: 0 };
  const previous = el("button", { type: "button", class: "previous", text: "‹ previous" });
  const next = el("button", { type: "button", class: "next", text: "next ›" });
  const where = el("span", { class: "where" });
  const element = el("div", { class: "pager", "data-pager": name }, previous, where, next);
  previous.addEventListener("click", () => onChange(Math.max(0, state.offset - state.limit)));
  next.addEventListener("click", () => onChange(state.offset + state.limit));
  return {
    element,
    // Show the page at `offset` of `limit` items among `total`.
    update(offset, limit, total) {
      state = { offset, limit, total };
      where.textContent = total
        ? `${count(offset + 1)}–${count(Math.min(total, offset + limit))} of ${count(total)}`
        : "none";
      previous.disabled = offset <= 0;
      next.disabled = offset + limit >= total;
    },
  };
}

// The offset of the last page that still starts within `total` items: a list that shrank
// under a page shows its last page rather than an empty one.
export const clampOffset = (offset, limit, total) =>
  Math.max(0, Math.min(offset, Math.floor(Math.max(0, total - 1) / limit) * limit));
