// Fleet: one tile per machine with its load, memory, TTL, instances and port
// leases (GET /v1/resources, GET /v1/leases/port). Tiles past the first
// PAGE are rendered on request, so a fleet of 10,000 stays usable.
import { h, num, span, bytes, notice } from '../dom.js';

export const needs = ['resources', 'leases'];
const PAGE = 2500;

export function mount(el) {
  let limit = PAGE;
  let last = null;
  const filter = h('input', { id: 'fleet-filter', type: 'search', placeholder: 'name', autocomplete: 'off', oninput: () => { limit = PAGE; draw(); } });
  const sort = h('select', { id: 'fleet-sort', onchange: () => draw() },
    h('option', { value: 'name', text: 'name' }),
    h('option', { value: 'load-desc', text: 'load, highest first' }),
    h('option', { value: 'load-asc', text: 'load, lowest first' }));
  const count = h('p', { class: 'count', 'aria-live': 'polite' });
  const grid = h('ul', { class: 'tiles', 'aria-label': 'Machines' });
  const more = h('button', { type: 'button', hidden: true, onclick: () => { limit += PAGE; draw(); } });
  const section = h('div', { id: 'fleet', 'data-machine-count': '0' });
  section.append(
    h('div', { class: 'controls' },
      h('label', { for: 'fleet-filter', text: 'Filter by name' }), filter,
      h('label', { for: 'fleet-sort', text: 'Sort by' }), sort),
    count, grid, more);
  el.append(h('h2', { text: 'Fleet' }), section);

  function draw() {
    const d = last;
    if (!d) return;
    if (d.errors.resources) { grid.replaceChildren(notice(d.errors.resources.message, 'error')); return; }
    if (!d.resources) { grid.replaceChildren(notice('Loading…')); return; }
    const machines = group(d.resources, d.leases || []);
    section.dataset.machineCount = String(machines.length);
    const q = filter.value.trim().toLowerCase();
    let shown = q ? machines.filter((m) => m.name.toLowerCase().includes(q)) : machines;
    const s = sort.value;
    if (s === 'load-desc') shown.sort((a, b) => (b.load ?? -1) - (a.load ?? -1) || a.name.localeCompare(b.name));
    else if (s === 'load-asc') shown.sort((a, b) => (a.load ?? Infinity) - (b.load ?? Infinity) || a.name.localeCompare(b.name));
    const now = Date.now();
    const frag = document.createDocumentFragment();
    for (const m of shown.slice(0, limit)) frag.append(tile(m, now));
    grid.replaceChildren(frag);
    count.textContent = num(machines.length) + ' machines' + (q ? ', ' + num(shown.length) + ' match' : '') +
      (shown.length > limit ? ', showing the first ' + num(limit) : '');
    more.hidden = shown.length <= limit;
    more.textContent = 'Show ' + num(Math.min(PAGE, shown.length - limit)) + ' more';
    if (!machines.length) grid.replaceChildren(notice('No machine is registered.'));
    else if (!shown.length) grid.replaceChildren(notice('No machine name contains “' + filter.value.trim() + '”.'));
  }

  return { update(d) { last = d; draw(); } };
}

// group gathers the resources and leases of each machine.
function group(resources, leases) {
  const by = new Map();
  const get = (name) => {
    let m = by.get(name);
    if (!m) { m = { name, machine: null, instances: [], leases: [], load: null }; by.set(name, m); }
    return m;
  };
  for (const r of resources) {
    const m = get(r.machine || r.name);
    if (r.kind === 'machine') {
      m.machine = r;
      const l = r.attrs && r.attrs.load;
      if (l && Array.isArray(l.loadAvg) && l.cpuCount > 0) m.load = l.loadAvg[0] / l.cpuCount;
      m.mem = l && l.totalMem ? { used: l.totalMem - (l.freeMem || 0), total: l.totalMem } : null;
    } else {
      m.instances.push(r);
    }
  }
  for (const l of leases) get(l.machine).leases.push(l);
  return [...by.values()].sort((a, b) => a.name.localeCompare(b.name));
}

function level(load) {
  if (load === null) return ['unknown', 'no load reported'];
  if (load < 0.7) return ['ok', 'normal'];
  if (load < 1) return ['warn', 'busy'];
  return ['bad', 'overloaded'];
}

function tile(m, now) {
  const [cls, word] = level(m.load);
  const expires = m.machine ? m.machine.expiresAt : Math.min(...m.instances.map((i) => i.expiresAt));
  return h('li', { class: 'tile ' + cls, 'data-machine': m.name },
    h('h3', { text: m.name }),
    h('dl', {},
      h('dt', { text: 'Load' }),
      h('dd', {}, h('span', { class: 'load ' + cls, text: m.load === null ? '-' : m.load.toFixed(2) }), ' ', word),
      h('dt', { text: 'Memory' }),
      h('dd', { text: m.mem ? bytes(m.mem.used) + ' of ' + bytes(m.mem.total) : '-' }),
      h('dt', { text: 'TTL left' }),
      h('dd', { text: Number.isFinite(expires) ? span(expires - now) : '-' })),
    m.instances.length ? h('ul', { class: 'inst', 'aria-label': 'Instances' },
      m.instances.map((i) => h('li', {}, h('span', { text: i.name || i.id }), i.endpoint ? h('code', { text: i.endpoint }) : ''))) : '',
    m.leases.length ? h('p', { class: 'ports' }, 'Ports: ',
      m.leases.map((l, i) => [i ? ', ' : '', h('code', { text: String(l.port) }), ' ' + l.purpose])) : '');
}
