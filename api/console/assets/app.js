// The console's entry: routing between the views, the token prompt, and
// live updates. Events of /v1/events are applied to the records held here
// (or mark what must be read again); the screen is redrawn at most once a
// second, and nothing is read while the tab is hidden.
import { takeFragmentToken, token, setToken, forgetToken, get } from './api.js';
import { openStream } from './stream.js';
import { clock } from './dom.js';
import * as cluster from './views/cluster.js';
import * as fleet from './views/fleet.js';
import * as ports from './views/ports.js';
import * as tokens from './views/tokens.js';
import * as timeline from './views/timeline.js';

const views = { cluster, fleet, ports, tokens, timeline };
const titles = { cluster: 'Cluster', fleet: 'Fleet', ports: 'Ports', tokens: 'Tokens', timeline: 'Timeline' };
const sources = {
  primary: { path: '/v1/primary' },
  overview: { path: '/v1/cluster/overview' },
  resources: { path: '/v1/resources', key: (r) => r.id },
  leases: { path: '/v1/leases/port', key: (l) => l.port },
  tokens: { path: '/v1/tokens/member', key: (t) => t.machine },
  timeline: { path: '/v1/cluster/timeline' },
};
// What an event makes stale: a key read again, unless the event was applied.
const eventReads = {
  primary: ['primary', 'overview', 'timeline', 'resources', 'leases'], // a claim rebases every TTL
  candidate: ['overview', 'timeline'],
  timeline: ['timeline'],
  reset: Object.keys(sources),
};
const applied = { resource: 'resources', lease: 'leases', token: 'tokens' };

const $ = (id) => document.getElementById(id);
const state = {
  view: null, mounted: null,
  data: {},            // key → value (Map for keyed sources)
  errors: {},
  dirty: new Set(Object.keys(sources)),
  reading: new Map(),  // key → events that arrived during its read
  changed: true,
  stream: null, mode: 'starting', polling: false,
  running: false, busy: false, updatedAt: 0,
};

function route() {
  const m = /^\/ui\/([a-z]+)\/?$/.exec(location.pathname);
  const v = m && views[m[1]] ? m[1] : 'cluster';
  if (location.pathname !== '/ui/' + v) history.replaceState(null, '', '/ui/' + v);
  return v;
}

function showView(v) {
  state.view = v;
  document.title = titles[v] + ' · elanous console';
  for (const a of document.querySelectorAll('nav a[data-view]')) {
    if (a.dataset.view === v) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  const el = $('view');
  el.replaceChildren();
  el.className = 'view view-' + v;
  state.mounted = views[v].mount(el);
  state.changed = true;
  if (state.running) { render(); tick(); }
}

function needs() { return new Set(['primary', ...views[state.view].needs]); }

function snapshot() {
  const out = { errors: state.errors };
  for (const [k, src] of Object.entries(sources)) {
    const v = state.data[k];
    out[k] = v instanceof Map ? [...v.values()] : v;
    if (v === undefined || (src.key && !v)) out[k] = null;
  }
  return out;
}

function render() {
  if (!state.running || !state.changed) return;
  state.changed = false;
  const p = state.data.primary;
  const el = $('primary');
  if (p) {
    el.dataset.primaryHolder = p.holder || '';
    el.dataset.primaryGeneration = String(p.generation || 0);
    el.replaceChildren('Primary: ', Object.assign(document.createElement('strong'), { textContent: p.holder || 'unknown' }),
      p.generation ? ' · generation ' + p.generation : '', p.known ? '' : ' (not confirmed)');
  }
  state.mounted.update(snapshot());
  state.updatedAt = Date.now();
  status();
}

function status() {
  const how = { live: 'Live (event stream)', polling: 'Polling every second (this node has no event stream)',
    reconnecting: 'Reconnecting to the event stream…', starting: 'Connecting…' }[state.mode];
  $('status').textContent = (document.hidden ? 'Paused while the tab is hidden' : how) + (state.updatedAt ? ' · updated ' + clock(state.updatedAt) : '');
}

async function read(key) {
  const src = sources[key];
  state.reading.set(key, []);
  try {
    const v = await get(src.path);
    state.data[key] = src.key ? new Map(v.map((x) => [src.key(x), x])) : v;
    delete state.errors[key];
    for (const ev of state.reading.get(key) || []) applyEvent(ev.type, ev.data, false);
  } catch (e) {
    if (e.name === 'AbortError') return;
    if (e.auth && !(key === 'tokens' && e.status === 403)) { stop(e.message); return; }
    state.errors[key] = e;
    state.dirty.add(key); // try again on the next tick
  } finally {
    state.reading.delete(key);
    state.changed = true;
  }
}

// tick reads what is stale and needed, then redraws: at most once a second.
async function tick() {
  if (!state.running || state.busy || document.hidden) return;
  state.busy = true;
  try {
    if (state.polling) for (const k of needs()) state.dirty.add(k);
    else if (state.view === 'cluster' || state.view === 'ports') state.dirty.add('overview'); // lag and contact move without commits
    const want = [...needs()].filter((k) => state.dirty.has(k));
    for (const k of want) state.dirty.delete(k);
    await Promise.all(want.map(read));
    render();
  } finally {
    state.busy = false;
  }
}

function applyEvent(type, data, buffer = true) {
  const key = applied[type];
  if (key) {
    if (buffer && state.reading.has(key)) state.reading.get(key).push({ type, data });
    const m = state.data[key];
    if (m instanceof Map && data) {
      const id = type === 'resource' ? data.id : type === 'lease' ? data.port : data.machine;
      if (data.op === 'delete') m.delete(id);
      else if (type === 'token') m.set(id, { machine: data.machine, issuedAt: data.issuedAt });
      else m.set(id, data[type]);
      state.changed = true;
    }
  }
  for (const k of eventReads[type] || []) state.dirty.add(k);
  if (type === 'primary' && data && state.data.primary) {
    state.data.primary = Object.assign({}, state.data.primary, { holder: data.holder, generation: data.generation });
    state.changed = true;
  }
}

function startStream() {
  if (state.stream || state.polling) return;
  state.stream = openStream({
    onOpen() { state.mode = 'live'; for (const k of Object.keys(sources)) state.dirty.add(k); status(); },
    onEvent: (type, data) => applyEvent(type, data),
    onUnavailable() { state.stream = null; state.polling = true; state.mode = 'polling'; status(); },
    onAuth(e) { stop(e.message); },
    onDown() { state.mode = 'reconnecting'; status(); },
  });
}

function stopStream() {
  if (state.stream) state.stream.close();
  state.stream = null;
}

function start() {
  $('prompt').hidden = true;
  $('view').hidden = false;
  $('forget').hidden = false;
  state.running = true;
  state.data = {};
  state.errors = {};
  state.dirty = new Set(Object.keys(sources));
  state.changed = true;
  showView(route());
  if (!document.hidden) startStream();
}

// stop leaves the views and shows the prompt, with the server's message.
function stop(message) {
  state.running = false;
  stopStream();
  state.polling = false;
  state.mode = 'starting';
  forgetToken();
  $('view').hidden = true;
  $('view').replaceChildren();
  $('forget').hidden = true;
  $('prompt').hidden = false;
  const msg = $('prompt-message');
  msg.hidden = !message;
  msg.textContent = message ? 'The server refused the token: ' + message : '';
  $('status').textContent = '';
  $('token-input').value = '';
  $('token-input').focus();
}

function init() {
  takeFragmentToken();
  state.view = route();
  document.addEventListener('click', (e) => {
    const a = e.target.closest && e.target.closest('a[data-view]');
    if (!a || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    if (location.pathname !== a.pathname) history.pushState(null, '', a.pathname);
    if (state.running) { showView(route()); $('main').focus(); }
  });
  addEventListener('popstate', () => { if (state.running) showView(route()); });
  addEventListener('hashchange', () => { // a link with a token opened on this page
    if (!/token=/.test(location.hash)) return;
    stopStream();
    takeFragmentToken();
    if (token()) start();
  });
  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const v = $('token-input').value.trim();
    $('token-input').value = '';
    setToken(v);
    start();
  });
  $('forget').addEventListener('click', () => stop(''));
  document.addEventListener('visibilitychange', () => {
    if (!state.running) return;
    if (document.hidden) { stopStream(); if (!state.polling) state.mode = 'starting'; status(); return; }
    for (const k of Object.keys(sources)) state.dirty.add(k);
    startStream();
    tick();
  });
  setInterval(tick, 1000);
  if (token()) start(); else stop('');
}

init();
