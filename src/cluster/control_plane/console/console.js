// Koi's web console: one page over the control plane's REST API (src/cluster/control_plane/
// api.h). The operator logs in with an API token, kept in this tab's sessionStorage; every
// call sends it as "Authorization: Bearer", so the page sees exactly what the token may: a
// tenant its own namespace, an admin every one. The page follows the watch stream
// (/apis/v1/watch, server-sent events read through fetch, which can send the token where
// EventSource cannot) and refreshes as soon as an object changes; the charts, whose numbers
// are not objects, and everything else refresh every REFRESH_MS too.
// Charts are SVG drawn here (lineChart); each chart's <svg> carries data-points (points drawn)
// and data-last (the newest value of its first series) for tests and for the curious.
'use strict';

const REFRESH_MS = 2000;
const WATCH_RETRY_MS = 1000;
const CHANGE_DELAY_MS = 200;  // changes come in bursts: one refresh for a burst
const ACTIVITY_ROWS = 30;
const SVG = 'http://www.w3.org/2000/svg';
const COLORS = ['#1f6fc4', '#d9681b', '#2c9c4a', '#9b3cb5'];
const state = { token: null, who: null, selected: null, timer: null, refreshing: false, again: false,
                watch: null, changeTimer: null };

// ---- DOM helpers: text always through textContent, never HTML from the API ----

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c ?? '')));
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function fillTable(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows);
}

function fmtNumber(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return '-';
  if (Math.abs(x) >= 1000) return x.toFixed(0);
  return Number(x.toPrecision(digits)).toString();
}

function fmtTime(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString();
}

function fmtBytes(n) {
  if (!n) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (n >= 1024 && i + 1 < units.length) n /= 1024, ++i;
  return `${fmtNumber(n)} ${units[i]}`;
}

// ---- the API ----

async function api(path) {
  const r = await fetch(path, { headers: { Authorization: 'Bearer ' + state.token } });
  const text = await r.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = { message: text };
  }
  if (!r.ok) {
    const e = new Error(`${path}: ${body.message || r.statusText}`);
    e.status = r.status;
    throw e;
  }
  return body;
}

// A kind's collection: the tenant's own namespace, or every namespace for an admin.
function collection(plural) {
  if (state.who.admin) return `/apis/v1/${plural}`;
  return `/apis/v1/namespaces/${encodeURIComponent(state.who.namespace)}/${plural}`;
}

function objectPath(plural, ns, name, sub) {
  const base = `/apis/v1/namespaces/${encodeURIComponent(ns)}/${plural}/${encodeURIComponent(name)}`;
  return sub ? `${base}/${sub}` : base;
}

// ---- charts ----

// Draws `series` ([{name, points: [[x, y], ...]}], y null for a gap) into `svg`, with the
// axes' ranges written at their ends; `xTime` labels x as wall-clock seconds.
function lineChart(svg, series, { xTime = false } = {}) {
  const W = 480, H = 200, L = 48, R = 8, T = 18, B = 22;
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  const has = (p) => p[1] !== null && p[1] !== undefined;
  const all = series.flatMap((s) => s.points.filter(has));
  const children = [];
  svg.dataset.points = String(all.length);
  const first = series[0] ? series[0].points.filter(has) : [];
  svg.dataset.last = first.length ? String(first[first.length - 1][1]) : '';
  if (all.length === 0) {
    children.push(Object.assign(svgEl('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }), { textContent: 'no data yet' }));
    svg.replaceChildren(...children);
    return;
  }
  // x spans every point, gaps too, so charts of one time range line up; y only the values.
  const xs = series.flatMap((s) => s.points.map((p) => p[0])), ys = all.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const y0 = Math.min(0, ...ys), top = Math.max(...ys);
  const y1 = top > y0 ? top : y0 + 1;  // all values equal (say an idle 0): a unit range
  const sx = (x) => L + ((x - x0) / (x1 - x0 || 1)) * (W - L - R);
  const sy = (y) => H - B - ((y - y0) / (y1 - y0 || 1)) * (H - T - B);
  children.push(svgEl('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }));
  children.push(svgEl('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }));
  const label = (x, y, text, anchor) => {
    const t = svgEl('text', { x, y, 'text-anchor': anchor });
    t.textContent = text;
    children.push(t);
  };
  label(L - 4, T + 4, fmtNumber(y1), 'end');
  label(L - 4, H - B, fmtNumber(y0), 'end');
  label(L, H - 6, xTime ? fmtTime(x0) : fmtNumber(x0), 'start');
  label(W - R, H - 6, xTime ? fmtTime(x1) : fmtNumber(x1), 'end');
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    // A missing value breaks the line: one polyline per run of values, a dot for a lone one.
    let run = [];
    const flush = () => {
      if (run.length === 1) {
        children.push(svgEl('circle', { cx: run[0][0], cy: run[0][1], r: 2, fill: color, 'data-series': s.name }));
      } else if (run.length > 1) {
        children.push(svgEl('polyline', { points: run.map((p) => p.join(',')).join(' '), stroke: color,
                                          'data-series': s.name }));
      }
      run = [];
    };
    for (const p of s.points) {
      if (has(p)) run.push([sx(p[0]).toFixed(1), sy(p[1]).toFixed(1)]);
      else flush();
    }
    flush();
    const legend = svgEl('text', { x: L + 8 + i * 100, y: 12, fill: color });
    legend.textContent = s.name;
    children.push(legend);
  });
  svg.replaceChildren(...children);
}

// ---- views ----

function reasonOf(job) {
  const st = job.status;
  if (!st.reason && !st.message) return '';
  return st.message ? `${st.reason}: ${st.message}` : st.reason;
}

async function renderJobs() {
  const list = await api(collection('jobs'));
  state.resourceVersion ??= list.metadata.resourceVersion;
  const rows = list.items.map((j) => {
    const tr = el('tr', { 'data-job': j.metadata.name, 'data-namespace': j.metadata.namespace },
      el('td', {}, j.metadata.name), el('td', {}, j.metadata.namespace), el('td', {}, j.spec.kind),
      el('td', {}, j.spec.queue), el('td', { class: 'phase phase-' + j.status.phase }, j.status.phase),
      el('td', {}, j.status.restarts), el('td', { class: 'reason' }, reasonOf(j)));
    if (state.selected && state.selected.ns === j.metadata.namespace && state.selected.name === j.metadata.name) {
      tr.classList.add('selected');
    }
    tr.addEventListener('click', () => selectJob(j.metadata.namespace, j.metadata.name));
    return tr;
  });
  fillTable('jobs', rows);
}

// The selection lives in the address (#job/NS/NAME), so a link opens a job; hashchange shows it.
function selectJob(ns, name) {
  location.hash = `#job/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;
}

function selectFromHash() {
  const m = location.hash.match(/^#job\/([^/]+)\/([^/]+)$/);
  state.selected = m ? { ns: decodeURIComponent(m[1]), name: decodeURIComponent(m[2]) } : null;
}

async function renderJobDetail() {
  const panel = document.getElementById('job-detail');
  if (!state.selected) {
    panel.hidden = true;
    return;
  }
  const { ns, name } = state.selected;
  panel.hidden = false;
  document.getElementById('job-name').textContent = `${ns}/${name}`;
  const status = document.getElementById('job-status');
  let job;
  try {
    job = await api(objectPath('jobs', ns, name));
  } catch (e) {
    status.textContent = e.message;
    status.className = 'error';
    lineChart(document.getElementById('loss-chart'), []);
    fillTable('job-events', []);
    return;
  }
  status.className = '';
  status.textContent = `${job.spec.kind} job, ${job.status.phase}` +
    (reasonOf(job) ? ` (${reasonOf(job)})` : '') + `; attempts ${job.status.attempts}, restarts ${job.status.restarts}`;
  const [metrics, events] = await Promise.all([api(objectPath('jobs', ns, name, 'metrics')),
                                               api(objectPath('jobs', ns, name, 'events'))]);
  const series = [{ name: 'loss', points: metrics.series.loss || [] }];
  if (metrics.series.val_loss) series.push({ name: 'val_loss', points: metrics.series.val_loss });
  lineChart(document.getElementById('loss-chart'), series);
  fillTable('job-events', events.items.map((e) => el('tr', {}, el('td', {}, fmtTime(e.timestamp)),
    el('td', {}, e.type), el('td', {}, e.reason), el('td', {}, e.message))));
}

function deploymentCard(d) {
  const key = `${d.metadata.namespace}/${d.metadata.name}`;
  let card = document.querySelector(`.deployment[data-key="${CSS.escape(key)}"]`);
  if (card) return card;
  card = el('div', { class: 'deployment', 'data-key': key, 'data-deployment': d.metadata.name },
    el('h3', {}, key), el('p', { class: 'summary' }),
    el('table', { class: 'replicas' }, el('thead', {}, el('tr', {}, el('th', {}, 'version'), el('th', {}, 'weight'),
      el('th', {}, 'replicas'), el('th', {}, 'ready'))), el('tbody')),
    el('div', { class: 'charts' },
      el('figure', {}, el('figcaption', {}, 'requests per second'), svgEl('svg', { class: 'chart', 'data-chart': 'qps' })),
      el('figure', {}, el('figcaption', {}, 'latency (ms): TTFT p50/p99, between tokens p50, end to end p50'),
        svgEl('svg', { class: 'chart', 'data-chart': 'latency' })),
      el('figure', {}, el('figcaption', {}, 'generated tokens per second'),
        svgEl('svg', { class: 'chart', 'data-chart': 'tokens' })),
      el('figure', {}, el('figcaption', {}, 'KV-cache usage (%), running and waiting requests'),
        svgEl('svg', { class: 'chart', 'data-chart': 'load' }))));
  document.getElementById('deployments').append(card);
  return card;
}

async function renderDeployments() {
  const list = await api(collection('deployments'));
  const keep = new Set();
  await Promise.all(list.items.map(async (d) => {
    const card = deploymentCard(d);
    keep.add(card);
    const st = d.status || {};
    const rollout = st.rollout ? `; rolling out v${st.rollout.toVersion} at ${st.rollout.weight}%` : '';
    card.querySelector('.summary').textContent = `model ${d.spec.model}, route ${d.spec.route || d.metadata.name}: ` +
      `${st.phase || 'Progressing'}, v${st.version || 0}, ${(st.replicas || []).length} of ${st.desiredReplicas || 0} ` +
      `replicas${rollout}` + (st.message ? ` (${st.message})` : '');
    card.querySelector('.replicas tbody').replaceChildren(...(st.versions || []).map((v) =>
      el('tr', {}, el('td', {}, 'v' + v.version), el('td', {}, fmtNumber(v.weight) + '%'), el('td', {}, v.replicas),
        el('td', {}, v.ready))));
    const m = await api(objectPath('deployments', d.metadata.namespace, d.metadata.name, 'metrics'));
    const at = (field) => m.points.map((p) => [p.time, p[field]]);
    lineChart(card.querySelector('svg[data-chart="qps"]'), [{ name: 'qps', points: at('qps') },
      { name: 'errors/s', points: at('errorsPerSecond') }], { xTime: true });
    lineChart(card.querySelector('svg[data-chart="latency"]'), [{ name: 'ttft p50', points: at('ttftP50Ms') },
      { name: 'ttft p99', points: at('ttftP99Ms') }, { name: 'itl p50', points: at('itlP50Ms') },
      { name: 'e2e p50', points: at('e2eP50Ms') }], { xTime: true });
    lineChart(card.querySelector('svg[data-chart="tokens"]'), [{ name: 'tokens/s', points: at('tokensPerSecond') }],
      { xTime: true });
    lineChart(card.querySelector('svg[data-chart="load"]'), [
      { name: 'kv %', points: m.points.map((p) => [p.time, 100 * p.kvCacheUsage]) },
      { name: 'running', points: at('running') }, { name: 'waiting', points: at('waiting') }], { xTime: true });
  }));
  for (const card of document.querySelectorAll('.deployment')) if (!keep.has(card)) card.remove();
}

async function renderModels() {
  const [models, versions] = await Promise.all([api(collection('models')), api(collection('modelversions'))]);
  fillTable('models', models.items.map((m) => {
    const aliases = Object.entries((m.status || {}).aliases || {}).map(([a, v]) => `${a} -> v${v}`).join(', ');
    return el('tr', {}, el('td', {}, m.metadata.name), el('td', {}, m.metadata.namespace),
      el('td', {}, 'v' + ((m.status || {}).latestVersion || 0)), el('td', {}, aliases));
  }));
  fillTable('versions', versions.items.map((v) => {
    const s = v.spec || {}, a = s.artifact || {};
    const metrics = Object.entries(s.metrics || {}).map(([k, x]) => `${k} ${fmtNumber(x)}`).join(', ');
    return el('tr', {}, el('td', {}, `${s.model} v${s.version}`), el('td', {}, a.format || ''),
      el('td', {}, fmtBytes(a.sizeBytes)), el('td', {}, metrics), el('td', {}, ((s.lineage || {}).job) || ''));
  }));
}

function resources(r) {
  if (!r) return '';
  return Object.entries(r).map(([k, v]) => `${k} ${typeof v === 'object' ? JSON.stringify(v) : fmtNumber(v)}`).join(', ');
}

async function renderQueues() {
  const list = await api('/apis/v1/queues');
  fillTable('queues', list.items.map((q) => {
    const quota = Object.entries(q.spec.quota || {}).map(([k, v]) => `${k} ${fmtNumber(v.nominal)}`).join(', ');
    return el('tr', {}, el('td', {}, q.metadata.name), el('td', {}, q.spec.tenant), el('td', {}, q.status.pendingJobs),
      el('td', {}, q.status.runningJobs), el('td', {}, resources(q.status.used)), el('td', {}, quota || 'unlimited'),
      el('td', {}, String(q.status.borrowing)));
  }));
}

// Measured usage (status.usage, sampled by the executor: /proc, nvidia-smi or scontrol) beside
// what plan() allocated. A figure the executor did not measure shows as "not measured".
function usageCells(u) {
  if (!u) return [el('td', {}, 'not measured'), el('td', {}, 'not measured'), el('td', {}, 'not measured')];
  const cpu = u.cpuUtilization === undefined ? 'not measured' : `${(100 * u.cpuUtilization).toFixed(1)}%`;
  const load = u.loadAverage === undefined ? '' : ` (load ${fmtNumber(u.loadAverage)})`;
  const mem = u.memoryUsedBytes === undefined ? 'not measured'
    : `${fmtBytes(u.memoryUsedBytes)} of ${fmtBytes(u.memoryTotalBytes)}`;
  const gpus = (u.gpus || []).map((g) =>
    `GPU ${g.index}: ${(100 * g.utilization).toFixed(0)}%, ${fmtBytes(g.memoryUsedBytes)} of ${fmtBytes(g.memoryTotalBytes)}`);
  return [el('td', { class: 'cpu-utilization', 'data-value': u.cpuUtilization ?? '' }, cpu + load),
          el('td', { class: 'memory-used', 'data-value': u.memoryUsedBytes ?? '' }, mem),
          el('td', { class: 'gpu-usage' }, gpus.length ? gpus.join('; ') : (u.gpuNote || 'no GPU'))];
}

async function renderNodes() {
  const list = await api('/apis/v1/nodes');
  fillTable('nodes', list.items.map((n) => {
    const u = (n.status || {}).usage;
    const svg = svgEl('svg', { class: 'chart spark', 'data-node': n.metadata.name });
    const history = u ? u.history : [];
    lineChart(svg, [{ name: 'CPU', points: history.map((p) => [p[0], p[1]]) },
                    { name: 'memory', points: history.map((p) => [p[0], p[2]]) }], { xTime: true });
    return el('tr', { 'data-node': n.metadata.name }, el('td', {}, n.metadata.name), el('td', {}, resources(n.spec)),
      el('td', {}, resources((n.status || {}).allocated)), ...usageCells(u), el('td', {}, svg));
  }));
}

// ---- the loop ----

// An event frame of the watch stream (its data: the event's JSON, one line per data: field)
// on top of the recent activity.
function showActivity(frame) {
  const data = frame.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
  let e;
  try {
    e = JSON.parse(data);
  } catch {
    return;
  }
  const o = e.involvedObject || {};
  const body = document.querySelector('#activity tbody');
  body.prepend(el('tr', { 'data-object': `${o.kind} ${o.namespace}/${o.name}` }, el('td', {}, fmtTime(e.timestamp)),
    el('td', {}, `${o.kind} ${o.namespace}/${o.name}`), el('td', {}, e.reason), el('td', {}, e.message)));
  while (body.children.length > ACTIVITY_ROWS) body.lastChild.remove();
}

// Follows /apis/v1/watch from the resourceVersion of the first job list: each event (an SSE
// frame with an id) asks for a refresh; a dropped stream is reopened from the last id.
async function watch(controller) {
  let after = null;
  while (!controller.signal.aborted) {
    after ??= state.resourceVersion;
    try {
      if (after === undefined) throw new Error('no resourceVersion yet');
      const r = await fetch(`/apis/v1/watch?resourceVersion=${after}`,
                            { headers: { Authorization: 'Bearer ' + state.token }, signal: controller.signal });
      if (!r.ok) throw new Error(`watch: ${r.status}`);
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const id = frame.match(/^id: (\d+)$/m);
          if (!id) continue;  // a keepalive comment
          // A reopened stream may repeat what the last one sent: ids only grow.
          if (after !== null && Number(id[1]) <= Number(after)) continue;
          after = id[1];
          if (/^event: EVENT$/m.test(frame)) showActivity(frame);
          clearTimeout(state.changeTimer);
          state.changeTimer = setTimeout(refresh, CHANGE_DELAY_MS);
        }
      }
    } catch (e) {
      if (controller.signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, WATCH_RETRY_MS));
  }
}

// One round over every view; a call while one runs asks for another right after it.
async function refresh() {
  if (state.refreshing) {
    state.again = true;
    return;
  }
  state.refreshing = true;
  clearTimeout(state.timer);
  const views = [renderJobs, renderJobDetail, renderDeployments, renderModels, renderQueues, renderNodes];
  const results = await Promise.allSettled(views.map((v) => v()));
  state.refreshing = false;
  if (!state.token) return;
  const failed = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
  if (failed.some((e) => e.status === 401)) return logout('the token is no longer valid; log in again');
  document.getElementById('refresh-error').textContent = failed.map((e) => e.message).join('; ');
  document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  if (state.again) {
    state.again = false;
    return refresh();
  }
  state.timer = setTimeout(refresh, REFRESH_MS);
}

async function login(token) {
  state.token = token;
  try {
    state.who = await api('/apis/v1/whoami');
  } catch (e) {
    state.token = null;
    document.getElementById('login-error').textContent =
      e.status === 401 ? 'unknown token: use a token from the control plane\'s config (tenants or admins)' : e.message;
    return;
  }
  sessionStorage.setItem('koi-token', token);
  document.getElementById('login-error').textContent = '';
  document.getElementById('login-panel').hidden = true;
  document.getElementById('app').hidden = false;
  document.getElementById('logout').hidden = false;
  document.getElementById('who').textContent = state.who.admin ? `admin ${state.who.name}` : `tenant ${state.who.name}`;
  selectFromHash();
  state.resourceVersion = undefined;
  if (state.watch) state.watch.abort();
  state.watch = new AbortController();
  watch(state.watch);
  refresh();
}

function logout(message) {
  clearTimeout(state.timer);
  clearTimeout(state.changeTimer);
  if (state.watch) state.watch.abort();
  sessionStorage.removeItem('koi-token');
  Object.assign(state, { token: null, who: null, selected: null, watch: null });
  document.getElementById('app').hidden = true;
  document.getElementById('logout').hidden = true;
  document.getElementById('login-panel').hidden = false;
  document.getElementById('who').textContent = '';
  document.getElementById('deployments').replaceChildren();
  document.querySelector('#activity tbody').replaceChildren();
  document.getElementById('login-error').textContent = typeof message === 'string' ? message : '';
}

document.getElementById('login').addEventListener('submit', (e) => {
  e.preventDefault();
  login(document.getElementById('token').value.trim());
});
document.getElementById('logout').addEventListener('click', () => logout());
window.addEventListener('hashchange', () => {
  if (!state.who) return;
  selectFromHash();
  state.resourceVersion = undefined;
  if (state.watch) state.watch.abort();
  state.watch = new AbortController();
  watch(state.watch);
  refresh();
});
if (sessionStorage.getItem('koi-token')) login(sessionStorage.getItem('koi-token'));
