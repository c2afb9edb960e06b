// uPlot charts of the views (the vendored uPlot, a global of uPlot.iife.min.js): every
// chart has a title, axes with units and a legend; the time axis is in the browser's zone
// and the legend shows the cursor's time in UTC too.

import { el } from "./fmt.js";

const utcClock = (seconds) => new Date(seconds * 1000).toISOString().slice(11, 19);

// The x series of a time chart: local date-time, UTC in brackets (legend on hover).
export const timeSeries = {
  label: "time",
  value: (u, seconds) =>
    seconds === null || seconds === undefined
      ? "—"
      : `${new Date(seconds * 1000).toLocaleString()} (UTC ${utcClock(seconds)})`,
};

// Width of a value axis, px: room for its longest tick label (uPlot's default is 50 px).
const tickWidth = (u, values) => 24 + 7 * Math.max(2, ...(values || []).map((v) => String(v).length));

export const stepped = () => uPlot.paths.stepped({ align: 1 });

// Tick labels of a time axis: the browser's clock time, with seconds only when the ticks
// fall between whole minutes (uPlot's default adds a second row with the date, which
// overlaps on narrow charts; the legend shows the full date under the cursor).
const clockTicks = (u, splits, axis, space, incr) =>
  splits.map((s) =>
    new Date(s * 1000).toLocaleTimeString([], {
      hour: "2-digit",
      minute: "2-digit",
      ...(incr % 60 ? { second: "2-digit" } : {}),
    }),
  );

// A time axis spans at least this many seconds (ending at the newest point): a service that
// started seconds ago would otherwise get ticks every few milliseconds.
const MIN_TIME_SPAN_S = 60;
const timeRange = (u, lo, hi) =>
  lo === null || hi === null || hi - lo >= MIN_TIME_SPAN_S ? [lo, hi] : [hi - MIN_TIME_SPAN_S, hi];

// Tick labels of a value axis: three significant digits, so small values (solve times of
// a fraction of a millisecond) do not all read "0".
const ticks = (u, splits) =>
  splits.map((v) => (v === null ? "" : Number(v.toPrecision(3)).toLocaleString(undefined, { maximumSignificantDigits: 3 })));

// A chart in `container` that is rebuilt when its series change (jobs come and go) and
// otherwise only given new data.
export class Chart {
  constructor(container, { title, yLabel, y2Label, height = 260, x = timeSeries, xAxis = {}, yAxis = {}, scales }) {
    this.container = container;
    this.base = { title, yLabel, y2Label, height, x, xAxis, yAxis, scales };
    this.plot = null;
    this.key = null;
    addEventListener("resize", () => this.plot?.setSize({ width: this.width(), height }));
  }

  width() {
    return Math.max(320, this.container.clientWidth - 8);
  }

  // series: uPlot series options (after x); data: [xs, ...ys].
  update(series, data) {
    const key = JSON.stringify(series.map((s) => [s.label, s.scale || "y"]));
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      return;
    }
    this.plot?.destroy();
    this.key = key;
    const { title, yLabel, y2Label, height, x, xAxis, yAxis } = this.base;
    const scales = this.base.scales || {
      x: { time: x === timeSeries },
      y: { range: (u, lo, hi) => [0, hi > 0 ? hi * 1.1 : 1] },
    };
    if (scales.x?.time && !scales.x.range) scales.x = { ...scales.x, range: timeRange };
    const axes = [
      x === timeSeries
        ? { label: "time (your time zone)", space: 90, values: clockTicks, ...xAxis }
        : { label: x.label, ...xAxis },
      { label: yLabel, scale: "y", values: ticks, size: tickWidth, ...yAxis },
    ];
    if (y2Label) {
      axes.push({ label: y2Label, scale: "y2", side: 1, values: ticks, size: tickWidth, grid: { show: false } });
    }
    this.plot = new uPlot(
      {
        title,
        width: this.width(),
        height,
        scales,
        axes,
        series: [x, ...series],
        legend: { live: true },
        cursor: { drag: { x: true, y: false } },
      },
      data,
      this.container,
    );
  }
}

// A container for a chart, with a class the tests find it by.
export function chartBox(name) {
  return el("div", { class: "chart", "data-chart": name });
}
