// The lateness chart: inline SVG drawn here (no library), one point per
// minute: deliveries as bars, p50 and p99 as lines with differently shaped
// markers (circle, square) and the maximum as rings, so the series differ
// without colour. A table of the same numbers follows it for screen readers.

import { h } from './dom.js';

const NS = 'http://www.w3.org/2000/svg';

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** A "nice" upper bound for an axis (1, 2 or 5 × 10^n), a multiple of 4 from 4 on so that the quarter ticks are whole. */
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  let nice = 10 * p;
  for (const m of [1, 2, 5, 10]) {
    if (m * p >= v) {
      nice = m * p;
      break;
    }
  }
  return nice >= 4 ? Math.ceil(nice / 4) * 4 : nice;
}

const hhmm = (iso) => new Date(iso).toISOString().slice(11, 16);

/**
 * `buckets`: [{minute, deliveries, p50_ms, p99_ms, max_ms}], oldest first.
 * Returns a <figure> with the SVG, its legend and a data table.
 */
export function latenessChart(buckets, { minutes = 60 } = {}) {
  const W = 900;
  const H = 300;
  const m = { l: 64, r: 48, t: 20, b: 34 };
  const iw = W - m.l - m.r;
  const ih = H - m.t - m.b;
  const data = [...buckets].sort((a, b) => Date.parse(a.minute) - Date.parse(b.minute));
  const end = data.length ? Date.parse(data[data.length - 1].minute) : Date.now();
  const start = end - (minutes - 1) * 60_000;
  const x = (t) => m.l + ((t - start) / (minutes * 60_000)) * iw;
  const slot = iw / minutes;
  const yMax = niceMax(Math.max(1, ...data.map((b) => Math.max(b.p99_ms ?? 0, b.max_ms ?? 0))));
  const y = (v) => m.t + ih - (Math.min(v, yMax) / yMax) * ih;
  const dMax = niceMax(Math.max(1, ...data.map((b) => b.deliveries || 0)));
  const yd = (v) => m.t + ih - (v / dMax) * ih;

  const svg = s(
    'svg',
    { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-labelledby': 'chart-title chart-desc', id: 'lateness-chart' },
    s('title', { id: 'chart-title' }, `Delivery lateness, last ${minutes} minutes`),
    s(
      'desc',
      { id: 'chart-desc' },
      data.length
        ? `${data.length} minutes with deliveries; highest p99 ${Math.max(...data.map((b) => b.p99_ms ?? 0))} ms, highest maximum ${Math.max(...data.map((b) => b.max_ms ?? 0))} ms.`
        : 'No delivery in this window.',
    ),
  );
  // Grid and left axis (ms).
  for (let i = 0; i <= 4; i++) {
    const v = (yMax / 4) * i;
    svg.append(
      s('line', { class: 'grid-line', x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }),
      s('text', { x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, `${v} ms`),
      s('text', { x: W - m.r + 6, y: yd((dMax / 4) * i) + 4 }, String((dMax / 4) * i)),
    );
  }
  svg.append(
    s('line', { class: 'axis', x1: m.l, x2: m.l, y1: m.t, y2: m.t + ih }),
    s('line', { class: 'axis', x1: m.l, x2: W - m.r, y1: m.t + ih, y2: m.t + ih }),
    s('text', { x: W - 4, y: m.t - 4, 'text-anchor': 'end' }, 'deliveries'),
  );
  // Time axis, a label every 15 minutes.
  for (let t = start; t <= end; t += 15 * 60_000) {
    svg.append(s('text', { x: x(t) + slot / 2, y: H - 12, 'text-anchor': 'middle' }, `${hhmm(t)}Z`));
  }
  // Bars: deliveries per minute (right axis).
  for (const b of data) {
    const t = Date.parse(b.minute);
    svg.append(s('rect', { class: 'bar', x: x(t) + 1, width: Math.max(1, slot - 2), y: yd(b.deliveries || 0), height: m.t + ih - yd(b.deliveries || 0) }));
  }
  const line = (key, cls) => {
    const pts = data.filter((b) => b[key] !== null && b[key] !== undefined).map((b) => `${(x(Date.parse(b.minute)) + slot / 2).toFixed(1)},${y(b[key]).toFixed(1)}`);
    if (pts.length > 1) svg.append(s('polyline', { class: cls, points: pts.join(' ') }));
  };
  line('p50_ms', 'p50');
  line('p99_ms', 'p99');
  for (const b of data) {
    const cx = x(Date.parse(b.minute)) + slot / 2;
    if (b.p50_ms !== null && b.p50_ms !== undefined) svg.append(s('circle', { class: 'p50-dot', cx, cy: y(b.p50_ms), r: 2.5 }));
    if (b.p99_ms !== null && b.p99_ms !== undefined) svg.append(s('rect', { class: 'p99-dot', x: cx - 2.5, y: y(b.p99_ms) - 2.5, width: 5, height: 5 }));
    if (b.max_ms !== null && b.max_ms !== undefined) svg.append(s('circle', { class: 'max-dot', cx, cy: y(b.max_ms), r: 4 }));
  }

  const legend = h(
    'div',
    { class: 'chart-legend' },
    h('span', {}, h('span', { class: 'swatch p50', 'aria-hidden': 'true' }), 'p50 (solid line, dots)'),
    h('span', {}, h('span', { class: 'swatch p99', 'aria-hidden': 'true' }), 'p99 (dashed line, squares)'),
    h('span', {}, h('span', { class: 'swatch max', 'aria-hidden': 'true' }), 'maximum (rings)'),
    h('span', {}, h('span', { class: 'swatch bar', 'aria-hidden': 'true' }), 'deliveries per minute (bars, right axis)'),
  );
  const table = h(
    'details',
    {},
    h('summary', { text: 'The numbers as a table' }),
    h(
      'table',
      {},
      h('thead', {}, h('tr', {}, ['Minute (UTC)', 'Deliveries', 'p50 ms', 'p99 ms', 'max ms'].map((t) => h('th', { scope: 'col', text: t })))),
      h(
        'tbody',
        {},
        data.map((b) =>
          h(
            'tr',
            {},
            h('td', { text: hhmm(b.minute) }),
            h('td', { class: 'num', text: String(b.deliveries ?? 0) }),
            h('td', { class: 'num', text: String(b.p50_ms ?? '—') }),
            h('td', { class: 'num', text: String(b.p99_ms ?? '—') }),
            h('td', { class: 'num', text: String(b.max_ms ?? '—') }),
          ),
        ),
      ),
    ),
  );
  return h('figure', {}, svg, legend, table);
}
