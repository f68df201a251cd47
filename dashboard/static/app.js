// gotune dashboard: reads the JSON API of the server that serves it and
// draws experiments, trials, curves and parameters with plain DOM and SVG.
'use strict';

const POLL_MS = 2000;
// INTERRUPTED is how the server shows a PENDING or RUNNING trial of a run
// that died (no process holds its experiment).
const STATUSES = ['PENDING', 'RUNNING', 'PAUSED', 'TERMINATED', 'STOPPED', 'ERROR', 'INTERRUPTED'];
const FINISHED = ['TERMINATED', 'STOPPED', 'ERROR'];
const STATUS_COLORS = {PENDING: '#9aa3b5', RUNNING: '#2f6fde', PAUSED: '#7a5bd1', TERMINATED: '#1b8a5a', STOPPED: '#d69e2e', ERROR: '#c9372c', INTERRUPTED: '#8a6d5a'};
const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#6b6ecf'];
const DEFAULT_CURVES = 8;
// The table shows PAGE trials at a time, read from the server; the charts
// and the best trial use the TOP best trials only, so that an experiment
// of any size costs the page the same.
const PAGE = 100;
const TOP = 500;
const SVGNS = 'http://www.w3.org/2000/svg';

const state = {
  experiments: [],
  exp: null,          // the selected experiment's name
  detail: null,       // its ExperimentDetail
  trials: [],         // the TOP best trials (or the first ones before any has the metric)
  page: [],           // the table's page of trials
  total: 0,           // how many trials the table's query selects
  offset: 0,          // the page's first trial in that order
  pageKey: '',        // the query of the page shown
  pageError: '',      // why the server refused the query, '' when it did not
  pageSeq: 0,         // counts the page's requests
  sort: {key: 'best', asc: true},
  filter: '',
  status: '',
  chosen: new Set(),  // trial numbers ticked for curves
  curveMetric: '',
  curveX: 'iteration',
  logY: false,
  trial: null,        // the open trial's number
  curves: null,
  curvesKey: '',
  tick: 0,
  version: null,      // the database's change counter when last read
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

async function api(path) {
  return (await apiResponse(path)).body;
}

// apiResponse is api's body with the response's headers.
async function apiResponse(path) {
  const resp = await fetch('api/' + path, {cache: 'no-store'});
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error || resp.statusText);
  return {body, headers: resp.headers};
}

// num turns the API's numbers, where NaN and infinities are strings, into numbers.
function num(v) {
  if (v === null || v === undefined) return null;
  return typeof v === 'string' ? Number(v) : v;
}

function fmt(v) {
  v = num(v);
  if (v === null) return '';
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

function fmtValue(v) {
  return typeof v === 'number' ? fmt(v) : String(v);
}

function fmtBytes(b) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + ' ' + units[i];
}

// The formats are made once: toLocaleTimeString makes one each call,
// which costs a list of hundreds of events more than the rest of its
// drawing.
const TIME_FORMAT = new Intl.DateTimeFormat([], {hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false});
const DATE_FORMAT = new Intl.DateTimeFormat([]);

function fmtTime(iso) {
  const d = new Date(iso);
  return TIME_FORMAT.format(d) + (sameDay(d) ? '' : ' ' + DATE_FORMAT.format(d));
}

function sameDay(d) {
  const n = new Date();
  return d.getFullYear() === n.getFullYear() && d.getMonth() === n.getMonth() && d.getDate() === n.getDate();
}

function colorOf(n) { return PALETTE[(n - 1) % PALETTE.length]; }

// ---- routing: #/e/NAME and #/e/NAME/t/N

function readHash() {
  const m = location.hash.match(/^#\/e\/([^/]+)(?:\/t\/(\d+))?/);
  return m ? {exp: decodeURIComponent(m[1]), trial: m[2] ? Number(m[2]) : null} : {exp: null, trial: null};
}

function go(exp, trial) {
  let h = '#/e/' + encodeURIComponent(exp);
  if (trial) h += '/t/' + trial;
  if (location.hash !== h) location.hash = h;
}

window.addEventListener('hashchange', () => route());

async function route() {
  const {exp, trial} = readHash();
  if (exp && exp !== state.exp) {
    state.exp = exp;
    state.detail = null;
    state.trials = [];
    state.page = [];
    state.offset = 0;
    state.chosen.clear();
    state.curveMetric = '';
    state.curvesKey = '';
    state.curves = null;
  }
  state.trial = trial;
  // Read before the page, so that a commit while it loads is seen next poll.
  try { state.version = (await api('version')).version; } catch (err) { state.version = null; }
  await refresh(true);
}

// ---- polling

async function refresh(full) {
  try {
    if (!state.exp) state.experiments = await api('experiments');
    if (!state.exp && state.experiments.length) {
      const running = state.experiments.filter((e) => e.status === 'RUNNING');
      go((running.length ? running[running.length - 1] : state.experiments[state.experiments.length - 1]).name);
      return;
    }
    renderExperiments();
    if (state.exp) {
      const name = encodeURIComponent(state.exp);
      const needDetail = full || !state.detail || state.tick % 5 === 0;
      // The table's page in the best-first order, unfiltered, is a part of
      // the best trials: one query serves both.
      const fromTop = pageQuery().toString() === 'order=best' && (state.pageKey !== state.exp + '?order=best' || state.offset + PAGE <= TOP);
      // The experiment's details (every metric's name) cost the most on a
      // large experiment: a first visit draws the page without them, then
      // again with them.
      const detailP = needDetail ? api('experiments/' + name) : Promise.resolve(state.detail);
      let detailIn = false;
      detailP.then(() => { detailIn = true; }, () => {});
      const [experiments, top, events, resources] = await Promise.all([
        api('experiments'),
        apiResponse('experiments/' + name + '/trials?order=best&limit=' + TOP),
        api('experiments/' + name + '/events?limit=200'),
        api('experiments/' + name + '/resources'),
        fromTop ? null : loadPage(),
      ]);
      state.experiments = experiments;
      renderExperiments();
      state.trials = top.body;
      if (fromTop) pageOfTop(top);
      const draw = async (force) => {
        renderSummary(resources);
        setupCurveControls();
        renderTrials();
        renderEvents(events);
        await renderCurves(force);
        renderParallel();
      };
      let drawn = false;
      if (!state.detail && !detailIn) {
        await draw(full);
        drawn = true;
      }
      state.detail = await detailP;
      await draw(full && !drawn);
      renderSearchLater(full);
      await renderTrial();
    }
    $('live').textContent = 'updated ' + new Date().toLocaleTimeString([], {hour12: false});
    $('live').classList.remove('error');
  } catch (err) {
    $('live').textContent = 'cannot read: ' + err.message;
    $('live').classList.add('error');
  }
  $('empty').hidden = state.experiments.length > 0;
  document.body.dataset.ready = 'true';
}

// poll reads the page again when the database changed since it was last
// read: an open tab on a sweep that is not running costs one tiny request
// every POLL_MS.
async function poll() {
  if (!document.hidden) {
    try {
      const v = (await api('version')).version;
      if (v !== state.version) {
        state.version = v;
        state.tick++;
        await refresh(false);
      }
    } catch (err) {
      $('live').textContent = 'cannot read: ' + err.message;
      $('live').classList.add('error');
    }
  }
  setTimeout(poll, POLL_MS);
}

// ---- experiments and summary

function renderExperiments() {
  const list = $('exp-list');
  list.replaceChildren(...state.experiments.map((e) => el('li', {},
    el('a', {href: '#/e/' + encodeURIComponent(e.name), class: e.name === state.exp ? 'selected' : ''},
      e.name,
      el('span', {class: 'sub'}, `${e.status.toLowerCase()} · ${e.trials} trials` + (e.best !== null ? ` · best ${fmt(e.best)}` : ''))))));
  const exp = currentExperiment();
  $('exp-title').textContent = exp ? `${exp.name} · ${exp.metric} (${exp.mode})` : '';
  document.title = exp ? `${exp.name} · gotune` : 'gotune';
}

function currentExperiment() {
  return state.experiments.find((e) => e.name === state.exp) || null;
}

function card(label, value, extra, cls) {
  return el('div', {class: 'card' + (cls ? ' ' + cls : '')}, el('div', {class: 'label'}, label), el('div', {class: 'value'}, value), extra);
}

function renderSummary(resources) {
  const exp = currentExperiment();
  if (!exp) return;
  const c = exp.counts;
  const finished = FINISHED.reduce((s, k) => s + c[k], 0);
  const total = Math.max(exp.num_samples || 0, exp.trials);
  const bar = el('div', {class: 'bar', title: `${finished} of ${total} trials finished`});
  for (const s of STATUSES) {
    if (c[s] && total) bar.append(el('span', {style: `width:${100 * c[s] / total}%;background:${STATUS_COLORS[s]}`, title: `${c[s]} ${s}`}));
  }
  const chips = el('div', {class: 'chips'}, ...STATUSES.filter((s) => c[s]).map((s) => el('span', {class: 'chip st-' + s}, `${c[s]} ${s}`)));
  const best = bestTrial();
  const cards = [
    card('status', exp.status),
    card('progress', `${finished} / ${total} finished`, el('div', {}, bar, chips), 'wide'),
    card(`best ${exp.metric} (${exp.mode})`, exp.best === null ? '—' : fmt(exp.best), best ? el('div', {class: 'muted'}, `trial ${best.trial_id}`) : null),
  ];
  const m = resources.manager;
  if (m) {
    let used = `${fmt(m.cpus_in_use)}/${fmt(m.cpus)} CPUs · ${fmt(m.gpus_in_use)}/${fmt(m.gpus)} GPUs`;
    if (m.memory) used += ` · ${fmtBytes(m.memory_in_use)}/${fmtBytes(m.memory)}`;
    cards.push(card('resources in use', used, m.waiting_groups ? el('div', {class: 'muted'}, `${m.waiting_groups} groups waiting`) : null, 'wide'));
  }
  const gpus = resources.samples.filter((s) => s.index >= 0);
  if (gpus.length) {
    cards.push(card('GPU use', gpus.map((s) => `${s.node}/${s.index} ${fmt(s.util)}%`).join(' · '), null, 'wide'));
  }
  $('summary').replaceChildren(...cards);
}

// ---- trials table

// bestTrial is the best trial that meets the experiment's constraints.
function bestTrial() {
  return rankedTrials().find((t) => t.feasible !== false) || null;
}

// rankedTrials are the trials that have the metric, best first.
function rankedTrials() {
  const exp = currentExperiment();
  const sign = exp && exp.mode === 'max' ? -1 : 1;
  return state.trials.filter((t) => Number.isFinite(num(t.best_metric)))
    .sort((a, b) => sign * (num(a.best_metric) - num(b.best_metric)) || a.trial_id - b.trial_id);
}

function paramNames() {
  const names = new Set((state.detail ? state.detail.params : []).map((p) => p.name));
  for (const t of state.trials) for (const k of Object.keys(t.params)) names.add(k);
  return [...names].sort();
}

function columns() {
  const exp = currentExperiment();
  const metric = exp ? exp.metric : 'metric';
  const cols = [
    {key: 'plot', label: '', sortable: false},
    {key: 'trial', label: 'trial', get: (t) => t.trial_id, num: true},
    {key: 'status', label: 'status', get: (t) => t.status},
    {key: 'iterations', label: 'iter', get: (t) => t.iterations, num: true},
    {key: 'best', label: 'best ' + metric, get: (t) => num(t.best_metric), num: true, metric: true},
    {key: 'last', label: 'last ' + metric, get: (t) => num(t.last_metric), num: true, metric: true},
    {key: 'restarts', label: 'restarts', get: (t) => t.restarts, num: true},
  ];
  for (const p of paramNames()) cols.push({key: 'param:' + p, label: p, get: (t) => t.params[p], param: p});
  return cols;
}

// pageQuery is the trial list API's query for the table: the status menu,
// the filter box and the sort. A filter token is a comparison on a
// parameter (lr<0.01, act=relu), on a numeric column (iterations>=5,
// best<0.3, trial>100), status=running, or else text found in the row.
function pageQuery() {
  const qs = new URLSearchParams();
  const params = new Set(paramNames());
  const numeric = {trial: 'trial', iter: 'iterations', iterations: 'iterations', restarts: 'restarts', best: 'best', last: 'last'};
  const statuses = state.status ? [state.status] : [];
  for (const tok of state.filter.trim().split(/\s+/).filter(Boolean)) {
    const m = tok.match(/^([\w.\/-]+)(<=|>=|!=|=|<|>)(.+)$/);
    if (m && m[1] === 'status' && m[2] === '=' && !state.status) statuses.push(m[3].toUpperCase());
    else if (m && numeric[m[1]] && !Number.isNaN(Number(m[3]))) qs.append('where', numeric[m[1]] + m[2] + m[3]);
    else if (m && params.has(m[1])) qs.append('param', tok);
    else qs.append('text', tok);
  }
  if (statuses.length) qs.set('status', statuses.join(','));
  // The columns' keys are the API's order keys.
  qs.set('order', (state.sort.asc ? '' : '-') + state.sort.key);
  return qs;
}

// loadPage reads the table's page from the server; a new query starts
// at its first page.
async function loadPage() {
  if (!state.exp) return;
  const qs = pageQuery();
  const key = state.exp + '?' + qs.toString();
  if (key !== state.pageKey) state.offset = 0;
  qs.set('offset', state.offset);
  qs.set('limit', PAGE);
  // Only the latest request's answer is shown: a poll's may come after it.
  const seq = ++state.pageSeq;
  try {
    const r = await apiResponse('experiments/' + encodeURIComponent(state.exp) + '/trials?' + qs.toString());
    if (seq !== state.pageSeq) return;
    state.page = r.body;
    state.total = Number(r.headers.get('X-Total-Count') || r.body.length);
    state.pageKey = key;
    state.pageError = '';
  } catch (err) {
    if (seq !== state.pageSeq) return;
    // A filter the server refuses (an unknown status) shows as such.
    state.page = [];
    state.total = 0;
    state.pageKey = key;
    state.pageError = err.message;
  }
}

// pageOfTop makes the table's page, of the unfiltered best-first order,
// out of the answer to the best trials' request.
function pageOfTop(top) {
  const key = state.exp + '?order=best';
  if (key !== state.pageKey) state.offset = 0;
  ++state.pageSeq; // a page request in flight is older
  state.page = top.body.slice(state.offset, state.offset + PAGE);
  state.total = Number(top.headers.get('X-Total-Count') || top.body.length);
  state.pageKey = key;
  state.pageError = '';
}

// reloadPage shows the page again after a change of query or offset.
async function reloadPage() {
  await loadPage();
  renderTrials();
}

function renderTrials() {
  const cols = columns();
  const head = el('tr', {}, ...cols.map((c) => {
    if (c.sortable === false) return el('th', {title: 'draw the curve'}, 'plot');
    const sorted = state.sort.key === c.key;
    // "best" and "last" order best first: for a metric to maximise, that
    // is from the highest value down, and the arrow says so.
    const exp = currentExperiment();
    const valuesUp = state.sort.asc !== Boolean(c.metric && exp && exp.mode === 'max');
    return el('th', {
      class: 'sortable' + (sorted ? ' sorted' + (valuesUp ? ' asc' : '') : ''),
      title: c.metric ? 'best first, then worse' : '',
      'data-key': c.key,
      onclick: () => {
        state.sort = {key: c.key, asc: sorted ? !state.sort.asc : true};
        reloadPage();
      },
    }, c.label);
  }));
  $('trials').tHead.replaceChildren(head);
  const shown = state.page;
  const drawn = curveTrials();
  const rows = shown.map((t) => {
    const box = el('input', {type: 'checkbox', title: 'draw its curve', onclick: (ev) => {
      ev.stopPropagation();
      if (state.chosen.size === 0) for (const n of drawn) state.chosen.add(n);
      if (box.checked) state.chosen.add(t.trial_id); else state.chosen.delete(t.trial_id);
      renderTrials();
      renderCurves(false);
    }});
    box.checked = drawn.includes(t.trial_id);
    const cells = cols.map((c) => {
      if (c.key === 'plot') return el('td', {}, box);
      const v = c.get(t);
      if (c.key === 'trial') return el('td', {class: 'num'}, el('span', {class: 'swatch', style: 'background:' + colorOf(t.trial_id)}), v);
      if (c.key === 'status') return el('td', {class: 'st-' + v, title: t.error || ''}, v);
      return el('td', {class: typeof v === 'number' || c.num ? 'num' : ''}, v === null || v === undefined ? '' : fmtValue(v));
    });
    return el('tr', {class: t.trial_id === state.trial ? 'selected' : '', 'data-trial': t.trial_id, onclick: () => go(state.exp, t.trial_id)}, ...cells);
  });
  $('trials').tBodies[0].replaceChildren(...rows);
  const all = currentExperiment() ? currentExperiment().trials : state.total;
  const range = shown.length ? `${state.offset + 1}–${state.offset + shown.length} of ` : '';
  $('trial-count').textContent = state.pageError ? state.pageError
    : range + (state.total === all ? `${state.total} trials` : `${state.total} matching of ${all} trials`);
  $('page-prev').disabled = state.offset === 0;
  $('page-next').disabled = state.offset + shown.length >= state.total;
}

// ---- learning curves

function curveTrials() {
  if (state.chosen.size) return [...state.chosen].sort((a, b) => a - b);
  const ranked = rankedTrials().slice(0, DEFAULT_CURVES).map((t) => t.trial_id);
  if (ranked.length) return ranked.sort((a, b) => a - b);
  return state.trials.slice(0, DEFAULT_CURVES).map((t) => t.trial_id);
}

function setupCurveControls() {
  const d = state.detail;
  if (!d) {
    // Before the details: the objective's curves only.
    const exp = currentExperiment();
    if (exp && !state.curveMetric) state.curveMetric = exp.metric;
    if (state.curveMetric) fillSelect($('curve-metric'), [state.curveMetric], state.curveMetric);
    return;
  }
  if (!state.curveMetric || !d.metrics.includes(state.curveMetric)) {
    state.curveMetric = d.metrics.includes(d.metric) ? d.metric : (d.metrics[0] || '');
  }
  fillSelect($('curve-metric'), d.metrics, state.curveMetric);
  const xs = ['iteration', 'time', ...d.metrics.filter((m) => m !== state.curveMetric)];
  if (!xs.includes(state.curveX)) state.curveX = 'iteration';
  fillSelect($('curve-x'), xs, state.curveX, {time: 'seconds since start'});
  $('pc-metric').textContent = 'best ' + d.metric;
}

function fillSelect(sel, values, current, labels) {
  const key = values.join('\n');
  if (sel.dataset.key !== key) {
    sel.replaceChildren(...values.map((v) => el('option', {value: v}, (labels && labels[v]) || v)));
    sel.dataset.key = key;
  }
  sel.value = current;
}

async function renderCurves(force) {
  const trials = curveTrials();
  const version = [...state.trials, ...state.page].filter((t) => trials.includes(t.trial_id)).map((t) => t.trial_id + ':' + t.iterations + ':' + t.status).join(',');
  const key = [state.exp, state.curveMetric, state.curveX, version].join('|');
  if (!state.curveMetric || !trials.length) {
    drawLines($('curves'), [], {});
    $('curves-legend').replaceChildren();
    return;
  }
  if (force || key !== state.curvesKey || !state.curves) {
    const q = `experiments/${encodeURIComponent(state.exp)}/curves?metric=${encodeURIComponent(state.curveMetric)}&x=${encodeURIComponent(state.curveX)}&trials=${trials.join(',')}`;
    state.curves = await api(q);
    state.curvesKey = key;
  }
  // The server keeps at most 500 points a curve (the first, the last, and
  // the lowest and highest of each stretch) and says how many it dropped.
  const series = state.curves.curves.map((c) => ({id: c.trial_id, color: colorOf(c.trial_id), points: c.points, dropped: c.dropped || 0}));
  drawLines($('curves'), series, {
    xLabel: state.curveX === 'time' ? 'seconds since start' : state.curveX,
    yLabel: state.curveMetric, logY: state.logY, wholeX: state.curveX === 'iteration',
  });
  $('curves-legend').replaceChildren(...series.map((s) => el('span', {}, el('i', {style: 'background:' + s.color}), 'trial ' + s.id +
    (s.dropped ? ` (${s.points.length} of ${s.points.length + s.dropped} points)` : ''))));
}

// ---- scales and axes

// linear maps [d0, d1] onto [r0, r1]; whole says the values are whole
// numbers (iterations), whose ticks are whole numbers too.
function linear(d0, d1, r0, r1, whole) {
  if (d0 === d1) { d0 -= 1; d1 += 1; }
  const f = (v) => r0 + (v - d0) / (d1 - d0) * (r1 - r0);
  f.ticks = (n) => niceTicks(d0, d1, n, whole);
  return f;
}

function logScale(d0, d1, r0, r1) {
  if (d0 === d1) { d0 /= 10; d1 *= 10; }
  const l0 = Math.log10(d0), l1 = Math.log10(d1);
  const f = (v) => r0 + (Math.log10(v) - l0) / (l1 - l0) * (r1 - r0);
  f.ticks = () => {
    const out = [];
    for (let e = Math.floor(l0); e <= Math.ceil(l1); e++) {
      for (const m of (l1 - l0 < 2 ? [1, 2, 5] : [1])) {
        const v = m * Math.pow(10, e);
        if (v >= d0 && v <= d1) out.push(v);
      }
    }
    return out.length >= 2 ? out : [d0, d1];
  };
  return f;
}

function niceTicks(lo, hi, n, whole) {
  const span = hi - lo;
  const step0 = span / Math.max(n, 1);
  const mag = Math.pow(10, Math.floor(Math.log10(step0)));
  // 2.5 times a power of ten is a whole step only from 25 on.
  const steps = whole ? [1, 2, 5, 10].map((m) => Math.max(1, m * mag)) : [1, 2, 2.5, 5, 10].map((m) => m * mag);
  const step = steps.find((s) => span / s <= n) || steps[steps.length - 1];
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

function extent(values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
  return [lo, hi];
}

function newChart(container) {
  const w = Math.max(container.clientWidth, 300), h = Math.max(container.clientHeight, 200);
  const root = svg('svg', {width: w, height: h, viewBox: `0 0 ${w} ${h}`});
  container.replaceChildren(root);
  return {root, w, h};
}

function noData(c, text) {
  svg('text', {x: c.w / 2, y: c.h / 2, 'text-anchor': 'middle', class: 'nodata'}, c.root).textContent = text;
}

// drawLines draws series of [x, y] points as an SVG line chart.
function drawLines(container, series, opts) {
  const c = newChart(container);
  const pts = series.flatMap((s) => s.points).filter((p) => !opts.logY || p[1] > 0);
  if (!pts.length) {
    noData(c, series.length ? 'no reports of this metric yet' : 'no trials to draw');
    return;
  }
  const m = {l: 58, r: 14, t: 10, b: 36};
  const [x0, x1] = extent(pts.map((p) => p[0]));
  const [y0, y1] = extent(pts.map((p) => p[1]));
  const x = linear(x0, x1, m.l, c.w - m.r, opts.wholeX);
  const pad = (y1 - y0) * 0.05 || Math.abs(y0) * 0.05 || 1;
  const y = opts.logY ? logScale(y0, y1, c.h - m.b, m.t) : linear(y0 - pad, y1 + pad, c.h - m.b, m.t);
  const grid = svg('g', {class: 'grid'}, c.root);
  const axis = svg('g', {class: 'axis'}, c.root);
  for (const v of y.ticks(6)) {
    svg('line', {x1: m.l, x2: c.w - m.r, y1: y(v), y2: y(v)}, grid);
    svg('text', {x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end'}, axis).textContent = fmt(v);
  }
  for (const v of x.ticks(8)) {
    svg('line', {x1: x(v), x2: x(v), y1: c.h - m.b, y2: c.h - m.b + 4}, axis);
    svg('text', {x: x(v), y: c.h - m.b + 16, 'text-anchor': 'middle'}, axis).textContent = fmt(v);
  }
  svg('line', {x1: m.l, x2: c.w - m.r, y1: c.h - m.b, y2: c.h - m.b}, axis);
  svg('line', {x1: m.l, x2: m.l, y1: m.t, y2: c.h - m.b}, axis);
  svg('text', {x: (m.l + c.w - m.r) / 2, y: c.h - 4, 'text-anchor': 'middle'}, axis).textContent = opts.xLabel || '';
  svg('text', {x: 12, y: (m.t + c.h - m.b) / 2, 'text-anchor': 'middle', transform: `rotate(-90 12 ${(m.t + c.h - m.b) / 2})`}, axis).textContent = opts.yLabel || '';
  for (const s of series) {
    const p = s.points.filter((q) => !opts.logY || q[1] > 0);
    if (!p.length) continue;
    const d = p.map((q, i) => (i ? 'L' : 'M') + x(q[0]).toFixed(1) + ',' + y(q[1]).toFixed(1)).join('');
    const path = svg('path', {d, class: 'curve', stroke: s.color, 'data-trial': s.id}, c.root);
    svg('title', {}, path).textContent = `trial ${s.id}: last ${fmt(p[p.length - 1][1])}`;
    if (p.length === 1) svg('circle', {cx: x(p[0][0]), cy: y(p[0][1]), r: 3, fill: s.color}, c.root);
  }
}

// ---- parallel coordinates

function renderParallel() {
  const c = newChart($('parallel'));
  const exp = currentExperiment();
  const trials = state.trials.filter((t) => Number.isFinite(num(t.best_metric)));
  if (!exp || !trials.length) {
    noData(c, 'no trial has reported ' + (exp ? exp.metric : 'the metric') + ' yet');
    return;
  }
  const domains = new Map((state.detail ? state.detail.params : []).map((p) => [p.name, p]));
  const axes = [];
  for (const p of paramNames()) {
    const vals = trials.map((t) => t.params[p]).filter((v) => v !== undefined && v !== null);
    const distinct = [...new Set(vals.map(String))];
    if (distinct.length < 2) continue;  // a constant says nothing
    const numeric = vals.every((v) => typeof v === 'number');
    const d = domains.get(p);
    // Choices, and whole numbers of few values, get one tick per value.
    const categorical = !numeric || (d && d.domain.startsWith('choice')) || (vals.every(Number.isInteger) && distinct.length <= 10);
    if (!categorical) {
      axes.push({name: p, kind: d && d.log && vals.every((v) => v > 0) ? 'log' : 'linear', get: (t) => t.params[p], vals});
    } else {
      const cats = numeric ? distinct.map(Number).sort((a, b) => a - b).map(String) : distinct.sort();
      axes.push({name: p, kind: 'cat', cats, get: (t) => t.params[p] === undefined ? undefined : String(t.params[p])});
    }
  }
  axes.push({name: 'best ' + exp.metric, kind: 'linear', get: (t) => num(t.best_metric), vals: trials.map((t) => num(t.best_metric)), metric: true});
  const m = {l: 40, r: 60, t: 22, b: 16};
  const step = axes.length > 1 ? (c.w - m.l - m.r) / (axes.length - 1) : 0;
  axes.forEach((a, i) => {
    a.x = axes.length > 1 ? m.l + i * step : c.w / 2;
    if (a.kind === 'cat') {
      const n = a.cats.length;
      a.y = (v) => c.h - m.b - (a.cats.indexOf(v) + 0.5) / n * (c.h - m.t - m.b);
      a.ticks = a.cats;
    } else {
      const [lo, hi] = extent(a.vals);
      a.y = (a.kind === 'log' ? logScale : linear)(lo, hi, c.h - m.b, m.t);
      a.ticks = a.y.ticks(5);
    }
  });
  // Colour by rank: dark is best.
  const ranked = rankedTrials();
  const rank = new Map(ranked.map((t, i) => [t.trial_id, ranked.length > 1 ? i / (ranked.length - 1) : 0]));
  const lines = svg('g', {}, c.root);
  for (const t of [...trials].sort((a, b) => rank.get(b.trial_id) - rank.get(a.trial_id))) {
    const ys = axes.map((a) => a.get(t));
    if (ys.some((v) => v === undefined || v === null)) continue;
    const d = axes.map((a, i) => (i ? 'L' : 'M') + a.x.toFixed(1) + ',' + a.y(ys[i]).toFixed(1)).join('');
    const path = svg('path', {d, class: 'pc-line' + (t.trial_id === state.trial ? ' selected' : ''), stroke: rampColor(rank.get(t.trial_id)), 'data-trial': t.trial_id}, lines);
    svg('title', {}, path).textContent = `trial ${t.trial_id}: ${exp.metric} ${fmt(t.best_metric)}\n` + Object.entries(t.params).map(([k, v]) => `${k}=${fmtValue(v)}`).join(' ');
    path.addEventListener('click', () => go(state.exp, t.trial_id));
  }
  const axisG = svg('g', {class: 'axis'}, c.root);
  for (const a of axes) {
    svg('line', {x1: a.x, x2: a.x, y1: m.t, y2: c.h - m.b}, axisG);
    const label = svg('text', {x: a.x, y: 12, 'text-anchor': 'middle'}, axisG);
    label.textContent = a.name + (a.kind === 'log' ? ' (log)' : '');
    for (const v of a.ticks) {
      svg('line', {x1: a.x - 3, x2: a.x, y1: a.y(v), y2: a.y(v)}, axisG);
      svg('text', {x: a.x + 5, y: a.y(v) + 4}, axisG).textContent = typeof v === 'number' ? fmt(v) : v;
    }
  }
}

// rampColor maps 0 (best) to 1 (worst) onto a dark-blue to light-orange ramp.
function rampColor(f) {
  const stops = [[24, 54, 120], [44, 127, 184], [127, 205, 187], [253, 174, 97]];
  const p = f * (stops.length - 1), i = Math.min(Math.floor(p), stops.length - 2), u = p - i;
  const c = stops[i].map((v, k) => Math.round(v + (stops[i + 1][k] - v) * u));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// ---- one trial

async function renderTrial() {
  const panel = $('trial-panel');
  if (!state.trial) {
    panel.hidden = true;
    $('trial-debug').hidden = true;
    return;
  }
  let d;
  try {
    d = await api(`experiments/${encodeURIComponent(state.exp)}/trials/${state.trial}`);
  } catch (err) {
    panel.hidden = false;
    panel.replaceChildren(el('p', {class: 'error-text'}, err.message));
    return;
  }
  const params = el('dl', {class: 'kv'}, ...Object.entries(d.params).sort().flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, fmtValue(v))]));
  const facts = el('dl', {class: 'kv'},
    el('dt', {}, 'status'), el('dd', {class: 'st-' + d.status}, d.status),
    el('dt', {}, 'iterations'), el('dd', {}, d.iterations),
    el('dt', {}, 'best'), el('dd', {}, fmt(d.best_metric)),
    el('dt', {}, 'last'), el('dd', {}, fmt(d.last_metric)),
    el('dt', {}, 'restarts'), el('dd', {}, d.restarts));
  const workers = table(['attempt', 'rank', 'node', 'pid', 'status', 'steps/s', 'GPU use', 'GPU memory', ''], d.workers.map((w) => [
    w.attempt, w.rank, w.node, w.pid || '', w.status,
    w.step_rate === null ? '' : fmt(w.step_rate),
    w.gpus.map((g) => `${g.index}: ${fmt(g.util)}%`).join(', '),
    w.gpus.map((g) => `${fmtBytes(g.memory_used)} / ${fmtBytes(g.memory_total)}`).join(', '),
    w.straggler ? el('span', {class: 'badge', title: 'much slower than the median of its attempt'}, 'straggler') : '',
  ]));
  const checkpoints = table(['iteration', 'path', 'kept'], d.checkpoints.map((c) => [c.iteration, c.path, c.kept ? 'yes' : 'deleted']));
  const events = table(['time', 'kind', 'message'], d.events.slice().reverse().map((e) => [fmtTime(e.time), e.kind, el('span', {class: 'msg'}, msgCell(e))]));
  panel.hidden = false;
  panel.replaceChildren(...[
    el('div', {class: 'panel-head'}, el('h2', {}, `Trial ${d.trial_id}`),
      el('button', {class: 'close', title: 'close', onclick: () => go(state.exp)}, '×')),
    d.error ? el('p', {class: 'error-text'}, d.error) : null,
    el('div', {class: 'detail-grid'},
      el('div', {}, el('h3', {}, 'Outcome'), facts, el('h3', {}, 'Parameters'), params),
      el('div', {},
        el('h3', {}, 'Workers'), d.workers.length ? workers : el('p', {class: 'muted'}, 'no workers recorded'),
        el('h3', {}, 'Checkpoints'), d.checkpoints.length ? checkpoints : el('p', {class: 'muted'}, 'none'),
        el('h3', {}, 'Events'), events)),
  ].filter(Boolean));
  for (const tr of $('trials').tBodies[0].rows) tr.classList.toggle('selected', Number(tr.dataset.trial) === state.trial);
  await renderDebug(d);
}

function msgCell(e) {
  return e.data ? e.message + ' ' + JSON.stringify(e.data) : e.message;
}

function table(head, rows) {
  return el('div', {class: 'table-wrap short'}, el('table', {class: 'data'},
    el('thead', {}, el('tr', {}, ...head.map((h) => el('th', {}, h)))),
    el('tbody', {}, ...rows.map((r) => el('tr', {}, ...r.map((v) => el('td', {class: typeof v === 'number' ? 'num' : ''}, v)))))));
}

// ---- one trial's live debugging: resources over time, logs, stacks
//
// Built once per trial and updated in place by each poll, so that the log
// view keeps its scroll, search and paging while the trial runs.

const LOG_PAGE = 200;
// lines are the log lines shown: from byte start of file part (0: the log,
// K: its K-th rotated file) to byte end of the log; olderPart is the
// rotated file above them, 0 when none.
const dbg = {key: '', rank: null, lines: [], part: 0, start: 0, olderPart: 0, end: 0, size: 0, query: ''};

async function renderDebug(d) {
  const panel = $('trial-debug');
  const key = state.exp + '/' + d.trial_id;
  const base = `experiments/${encodeURIComponent(state.exp)}/trials/${d.trial_id}`;
  const ranks = [...new Set(d.workers.filter((w) => w.log_path).map((w) => w.rank))].sort((a, b) => a - b);
  if (dbg.key !== key) {
    Object.assign(dbg, {key, base, rank: ranks.length ? ranks[0] : null, lines: [], part: 0, start: 0, olderPart: 0, end: 0, size: 0, query: ''});
    buildDebug(panel, d, ranks);
  }
  dbg.running = d.status === 'RUNNING';
  panel.hidden = false;
  $('stack-btn').disabled = !dbg.running;
  $('stack-btn').title = dbg.running ? 'take the current stack of every worker' : 'stacks are taken of a running trial only';
  // A log that cannot be read is said in the log's panel: the page itself
  // is fine.
  await Promise.all([renderUsage(), dbg.query ? null : updateLog(false).catch((err) => {
    $('log-info').textContent = 'cannot read the log: ' + err.message;
  })]);
}

function buildDebug(panel, d, ranks) {
  const rankSel = el('select', {id: 'log-rank', onchange: (ev) => { dbg.rank = Number(ev.target.value); resetLog(); }},
    ...ranks.map((r) => el('option', {value: r}, 'rank ' + r)));
  const search = el('input', {id: 'log-search', type: 'search', placeholder: 'search the log'});
  search.addEventListener('change', () => { dbg.query = search.value.trim(); dbg.query ? searchLog() : resetLog(); });
  const stackRank = el('select', {id: 'stack-rank'}, el('option', {value: ''}, 'every rank'),
    ...[...new Set(d.workers.map((w) => w.rank))].sort((a, b) => a - b).map((r) => el('option', {value: r}, 'rank ' + r)));
  panel.replaceChildren(
    el('div', {class: 'panel-head'}, el('h2', {}, `Trial ${d.trial_id}: live debugging`)),
    el('h3', {}, 'Resources per worker'),
    el('div', {id: 'usage', class: 'usage-grid'}),
    el('div', {class: 'panel-head'}, el('h3', {}, 'Log'), rankSel,
      el('label', {}, el('input', {type: 'checkbox', id: 'log-follow', checked: true}), ' follow'), search,
      el('button', {id: 'log-older', onclick: () => olderLog()}, 'older lines'),
      el('span', {id: 'log-info', class: 'muted'})),
    ranks.length ? el('pre', {id: 'log-view', class: 'log'}) : el('p', {id: 'log-view', class: 'muted'}, 'no worker of this trial keeps a log file'),
    el('div', {class: 'panel-head'}, el('h3', {}, 'Stacks'), stackRank,
      el('button', {id: 'stack-btn', onclick: () => takeStacks()}, 'take stacks'),
      el('span', {id: 'stack-info', class: 'muted'})),
    el('pre', {id: 'stack-view', class: 'log', hidden: true}));
}

function resetLog() {
  Object.assign(dbg, {lines: [], part: 0, start: 0, olderPart: 0, end: 0, size: 0});
  updateLog(true);
}

async function updateLog(force) {
  if (dbg.rank === null || dbg.query) return;
  const following = $('log-follow').checked;
  if (!force && !(following && dbg.running) && dbg.lines.length) return;
  const q = `${dbg.base}/log?rank=${dbg.rank}`;
  if (!dbg.lines.length) {
    const p = await api(`${q}&limit=${LOG_PAGE}`);
    if (p.absent) {
      $('log-info').textContent = `rank ${dbg.rank} has printed nothing but its reports yet`;
      $('log-older').disabled = true;
      return;
    }
    Object.assign(dbg, {lines: p.lines, part: 0, start: p.start, olderPart: p.older_part || 0, end: p.end, size: p.size});
  } else {
    const p = await api(`${q}&after=${dbg.end}`);
    if (p.rotated) {
      resetLog();
      return;
    }
    dbg.lines.push(...p.lines);
    dbg.end = p.end;
    dbg.size = p.size;
  }
  drawLog(following);
}

async function olderLog() {
  if (dbg.rank === null || dbg.query || (dbg.start === 0 && !dbg.olderPart)) return;
  // The top of a file continues at the end of the next older one.
  const q = dbg.start > 0 ? `part=${dbg.part}&before=${dbg.start}` : `part=${dbg.olderPart}`;
  const p = await api(`${dbg.base}/log?rank=${dbg.rank}&limit=${LOG_PAGE}&${q}`);
  dbg.lines.unshift(...p.lines);
  Object.assign(dbg, {part: p.part, start: p.start, olderPart: p.older_part || 0});
  drawLog(false);
  $('log-view').scrollTop = 0;
}

function drawLog(toEnd) {
  const view = $('log-view');
  view.textContent = dbg.lines.join('\n');
  if (toEnd) view.scrollTop = view.scrollHeight;
  const from = dbg.part ? `byte ${dbg.start} of rotated file ${dbg.part}` : `byte ${dbg.start}`;
  $('log-info').textContent = `${dbg.lines.length} lines shown, from ${from} to ${dbg.end} of ${dbg.size}` +
    (dbg.start > 0 || dbg.olderPart ? '; older lines above' : '');
  $('log-older').disabled = dbg.start === 0 && !dbg.olderPart;
}

async function searchLog() {
  const p = await api(`${dbg.base}/log?rank=${dbg.rank}&q=${encodeURIComponent(dbg.query)}`);
  const view = $('log-view');
  view.replaceChildren(...(p.matches || []).map((m) => el('div', {class: 'match'}, el('span', {class: 'muted'}, `@${m.offset} `), m.line)));
  $('log-info').textContent = `${(p.matches || []).length}${p.truncated ? '+' : ''} lines hold “${dbg.query}”; clear the search to page again`;
}

async function takeStacks() {
  const rank = $('stack-rank').value;
  $('stack-info').textContent = 'taking stacks…';
  const resp = await fetch(`api/${dbg.base}/stacks` + (rank === '' ? '' : '?rank=' + rank), {method: 'POST'});
  const body = await resp.json();
  const view = $('stack-view');
  view.hidden = false;
  if (!resp.ok) {
    $('stack-info').textContent = body.error;
    view.textContent = '';
    return;
  }
  $('stack-info').textContent = 'taken ' + fmtTime(body.time);
  view.textContent = body.stacks.map((s) => `=== rank ${s.rank} (${s.node || 'this node'}${s.pid ? ', pid ' + s.pid : ''})` +
    (s.error ? `: no stack: ${s.error}` : `, by ${s.method}\n${s.text}`)).join('\n');
}

const USAGE_CHARTS = [
  ['cpu', 'CPU % (of one core)', fmt],
  ['rss', 'memory (RSS)', fmtBytes],
  ['gpu_util', 'GPU utilisation %', fmt],
  ['gpu_memory', 'GPU memory', fmtBytes],
];

async function renderUsage() {
  const series = await api(`${dbg.base}/usage`);
  const box = $('usage');
  if (!series.length) {
    box.replaceChildren(el('p', {class: 'muted'}, 'no samples: resources are sampled every few seconds while process workers run'));
    return;
  }
  const latest = Math.max(...series.map((s) => s.attempt));
  const charts = [];
  box.replaceChildren(...USAGE_CHARTS.map(([kind, label, f]) => {
    const ss = series.filter((s) => s.kind === kind && s.attempt === latest);
    if (!ss.length) return null;
    const chart = el('div', {class: 'spark-chart'});
    charts.push([chart, ss, f]);
    return el('div', {class: 'spark', 'data-kind': kind}, el('div', {class: 'muted'}, label), chart,
      el('div', {class: 'legend'}, ...ss.map((s) => el('span', {},
        el('i', {style: `background:${colorOf(s.rank + 1)}`}), `rank ${s.rank}${s.gpu !== undefined ? ' gpu ' + s.gpu : ''}: ${f(s.points[s.points.length - 1][1])}`))));
  }).filter(Boolean));
  // Drawn once in the page, where the charts have their width.
  for (const [chart, ss, f] of charts) drawSpark(chart, ss, f);
}

// drawSpark draws a small chart of workers' series against seconds since
// the first sample.
function drawSpark(container, series, f) {
  const w = Math.max(container.clientWidth, 220), h = 90, m = {l: 56, r: 6, t: 6, b: 16};
  const root = svg('svg', {width: w, height: h, viewBox: `0 0 ${w} ${h}`});
  container.replaceChildren(root);
  const pts = series.flatMap((s) => s.points);
  const [x0, x1] = extent(pts.map((p) => p[0]));
  const [, y1] = extent(pts.map((p) => p[1]));
  const x = linear(x0, x1, m.l, w - m.r), y = linear(0, y1 || 1, h - m.b, m.t);
  svg('text', {x: m.l - 4, y: m.t + 8, 'text-anchor': 'end'}, root).textContent = f(y1 || 1);
  svg('text', {x: m.l - 4, y: h - m.b, 'text-anchor': 'end'}, root).textContent = '0';
  svg('text', {x: w - m.r, y: h - 2, 'text-anchor': 'end'}, root).textContent = `${fmt(x1 - x0)} s`;
  svg('line', {x1: m.l, x2: w - m.r, y1: h - m.b, y2: h - m.b, class: 'spark-axis'}, root);
  for (const s of series) {
    const d = s.points.map((q, i) => (i ? 'L' : 'M') + x(q[0]).toFixed(1) + ',' + y(q[1]).toFixed(1)).join('');
    const path = svg('path', {d, class: 'curve', stroke: colorOf(s.rank + 1)}, root);
    svg('title', {}, path).textContent = `rank ${s.rank}: ${f(s.points[s.points.length - 1][1])}`;
  }
}

// ---- events

function renderEvents(events) {
  $('events').tBodies[0].replaceChildren(...events.slice().reverse().map((e) => el('tr', {onclick: e.trial_id ? () => go(state.exp, e.trial_id) : null},
    el('td', {}, fmtTime(e.time)), el('td', {class: 'num'}, e.trial_id || ''), el('td', {}, e.kind), el('td', {class: 'msg'}, msgCell(e)))));
}

// ---- search: the Pareto front of several objectives, and importance

const search = {exp: '', front: null, imp: null, impError: '', x: '', y: '', impMetric: '', busy: false, again: null};

// loadSearch reads the front and the importance of the selected
// experiment; the importance only now and then, as it costs more.
async function loadSearch(full) {
  const name = encodeURIComponent(state.exp);
  if (search.exp !== state.exp) {
    Object.assign(search, {exp: state.exp, front: null, imp: null, impError: '', x: '', y: '', impMetric: ''});
    full = true;
  }
  // Only an experiment of several objectives has a front to draw.
  const several = state.detail && state.detail.objectives && state.detail.objectives.length > 1;
  search.front = several ? await api('experiments/' + name + '/front') : null;
  if (full || !search.imp && !search.impError || state.tick % 5 === 0) {
    const q = search.impMetric ? '?metric=' + encodeURIComponent(search.impMetric) : '';
    try {
      search.imp = await api('experiments/' + name + '/importance' + q);
      search.impError = '';
    } catch (err) {
      search.imp = null;
      search.impError = err.message;
    }
  }
}

async function renderSearch(full) {
  await loadSearch(full);
  renderFront();
  renderImportance();
}

// renderSearchLater draws the front and the importance without holding
// up the rest of the page: on a large experiment they cost the most.
function renderSearchLater(full) {
  if (search.busy) {
    // Once the one under way ends (it may be of another experiment).
    search.again = search.again || {full: false};
    search.again.full = search.again.full || full;
    return;
  }
  search.busy = true;
  renderSearch(full).catch((err) => {
    search.impError = err.message;
    renderImportance();
  }).finally(() => {
    search.busy = false;
    const again = search.again;
    search.again = null;
    if (again) renderSearchLater(again.full);
  });
}

// renderFront plots two of the objectives of an experiment that has
// several, one point per trial, the front's trials dark and joined.
function renderFront() {
  const objs = search.front ? search.front.objectives : [];
  $('front-panel').hidden = objs.length < 2;
  if (objs.length < 2) return;
  const names = objs.map((o) => o.metric);
  if (!names.includes(search.x)) search.x = names[0];
  if (!names.includes(search.y) || search.y === search.x) search.y = names.find((n) => n !== search.x);
  const labels = Object.fromEntries(objs.map((o) => [o.metric, `${o.metric} (${o.mode})`]));
  fillSelect($('front-x'), names, search.x, labels);
  fillSelect($('front-y'), names, search.y, labels);
  const mode = new Map(objs.map((o) => [o.metric, o.mode]));
  const c = newChart($('front'));
  const pts = search.front.trials
    .map((t) => ({t, x: num(t.values[search.x]), y: num(t.values[search.y])}))
    .filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y));
  if (!pts.length) {
    noData(c, `no trial has reported ${search.x} and ${search.y} yet`);
    return;
  }
  const m = {l: 58, r: 14, t: 10, b: 36};
  const [x0, x1] = extent(pts.map((p) => p.x));
  const [y0, y1] = extent(pts.map((p) => p.y));
  const xp = (x1 - x0) * 0.05 || Math.abs(x0) * 0.05 || 1, yp = (y1 - y0) * 0.05 || Math.abs(y0) * 0.05 || 1;
  const x = linear(x0 - xp, x1 + xp, m.l, c.w - m.r);
  const y = linear(y0 - yp, y1 + yp, c.h - m.b, m.t);
  const grid = svg('g', {class: 'grid'}, c.root);
  const axis = svg('g', {class: 'axis'}, c.root);
  for (const v of y.ticks(6)) {
    svg('line', {x1: m.l, x2: c.w - m.r, y1: y(v), y2: y(v)}, grid);
    svg('text', {x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end'}, axis).textContent = fmt(v);
  }
  for (const v of x.ticks(8)) {
    svg('line', {x1: x(v), x2: x(v), y1: c.h - m.b, y2: c.h - m.b + 4}, axis);
    svg('text', {x: x(v), y: c.h - m.b + 16, 'text-anchor': 'middle'}, axis).textContent = fmt(v);
  }
  svg('line', {x1: m.l, x2: c.w - m.r, y1: c.h - m.b, y2: c.h - m.b}, axis);
  svg('line', {x1: m.l, x2: m.l, y1: m.t, y2: c.h - m.b}, axis);
  const better = (n) => `${n} (${mode.get(n) === 'max' ? 'higher' : 'lower'} is better)`;
  svg('text', {x: (m.l + c.w - m.r) / 2, y: c.h - 4, 'text-anchor': 'middle'}, axis).textContent = better(search.x);
  svg('text', {x: 12, y: (m.t + c.h - m.b) / 2, 'text-anchor': 'middle', transform: `rotate(-90 12 ${(m.t + c.h - m.b) / 2})`}, axis).textContent = better(search.y);
  // The front of all the objectives, joined in x order where there are two.
  const front = pts.filter((p) => p.t.on_front).sort((a, b) => a.x - b.x || a.y - b.y);
  if (objs.length === 2 && front.length > 1) {
    svg('path', {class: 'front-line', d: front.map((p, i) => (i ? 'L' : 'M') + x(p.x).toFixed(1) + ',' + y(p.y).toFixed(1)).join('')}, c.root);
  }
  const dots = svg('g', {}, c.root);
  // Front last, so that it lies on top.
  for (const p of [...pts].sort((a, b) => a.t.on_front - b.t.on_front)) {
    const cx = x(p.x), cy = y(p.y), n = p.t.trial_id;
    let mark;
    if (p.t.feasible === false) {
      mark = svg('path', {class: 'infeasible', d: `M${cx - 4},${cy - 4}L${cx + 4},${cy + 4}M${cx - 4},${cy + 4}L${cx + 4},${cy - 4}`, 'data-trial': n}, dots);
    } else {
      mark = svg('circle', {cx, cy, r: p.t.on_front ? 5 : 4, class: 'front-point' + (p.t.on_front ? ' on-front' : '') + (n === state.trial ? ' selected' : ''), 'data-trial': n}, dots);
    }
    svg('title', {}, mark).textContent = `trial ${n}: ${search.x} ${fmt(p.x)}, ${search.y} ${fmt(p.y)}` +
      (p.t.on_front ? '\non the Pareto front' : '') + (p.t.feasible === false ? '\ninfeasible' : '');
    mark.addEventListener('click', () => go(state.exp, n));
  }
}

// renderImportance draws the parameters' importance as horizontal bars,
// largest first.
function renderImportance() {
  const objs = search.front ? search.front.objectives.map((o) => o.metric) : (search.imp ? [search.imp.metric] : []);
  const sel = $('imp-metric');
  sel.parentElement.hidden = objs.length < 2;
  if (objs.length) fillSelect(sel, objs, search.impMetric || objs[0]);
  const c = newChart($('importance'));
  const params = search.imp ? search.imp.params : [];
  if (!params.length) {
    noData(c, search.impError || 'no parameter to rank');
    return;
  }
  const m = {l: 110, r: 50, t: 8, b: 22};
  const band = (c.h - m.t - m.b) / params.length;
  const bh = Math.min(22, band * 0.7);
  const x = linear(0, Math.max(...params.map((p) => p.importance), 1e-9), m.l, c.w - m.r);
  const axis = svg('g', {class: 'axis'}, c.root);
  svg('line', {x1: m.l, x2: m.l, y1: m.t, y2: c.h - m.b}, axis);
  svg('text', {x: (m.l + c.w - m.r) / 2, y: c.h - 4, 'text-anchor': 'middle'}, axis).textContent =
    `share of importance to ${search.imp.metric} (${search.imp.trials} trials)`;
  params.forEach((p, i) => {
    const cy = m.t + band * (i + 0.5);
    svg('text', {x: m.l - 6, y: cy + 4, 'text-anchor': 'end'}, axis).textContent = p.param;
    const bar = svg('rect', {class: 'imp-bar', x: m.l, y: cy - bh / 2, width: Math.max(x(p.importance) - m.l, 1), height: bh, 'data-param': p.param}, c.root);
    svg('title', {}, bar).textContent = `${p.param}: ${fmt(p.importance)} (${p.trials} trials have it)`;
    svg('text', {x: x(p.importance) + 4, y: cy + 4}, axis).textContent = fmt(p.importance);
  });
}

// ---- controls

function init() {
  const sf = $('status-filter');
  for (const s of STATUSES) sf.append(el('option', {value: s}, s));
  sf.addEventListener('change', () => { state.status = sf.value; reloadPage(); });
  let typing = 0;
  $('filter').addEventListener('input', (ev) => {
    state.filter = ev.target.value;
    clearTimeout(typing);
    typing = setTimeout(reloadPage, 200);
  });
  $('page-prev').addEventListener('click', () => { state.offset = Math.max(0, state.offset - PAGE); reloadPage(); });
  $('page-next').addEventListener('click', () => { state.offset += PAGE; reloadPage(); });
  $('curve-metric').addEventListener('change', (ev) => { state.curveMetric = ev.target.value; setupCurveControls(); renderCurves(true); });
  $('curve-x').addEventListener('change', (ev) => { state.curveX = ev.target.value; renderCurves(true); });
  $('curve-log').addEventListener('change', (ev) => { state.logY = ev.target.checked; renderCurves(false); });
  $('front-x').addEventListener('change', (ev) => { search.x = ev.target.value; renderFront(); });
  $('front-y').addEventListener('change', (ev) => { search.y = ev.target.value; renderFront(); });
  $('imp-metric').addEventListener('change', (ev) => { search.impMetric = ev.target.value; renderSearch(true); });
  let resize = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resize);
    resize = setTimeout(() => { renderCurves(false); renderParallel(); renderFront(); renderImportance(); }, 150);
  });
  route().then(() => setTimeout(poll, POLL_MS));
}

init();
