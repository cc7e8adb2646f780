// Ports: the whole test band as a map (free or leased; a lease with its
// machine, purpose, fence, generation and expiry), and a search for a port.
import { h, num, span, table, notice } from '../dom.js';

export const needs = ['overview', 'leases'];

export function mount(el) {
  let last = null;
  const find = h('input', { id: 'port-find', type: 'search', inputmode: 'numeric', autocomplete: 'off', oninput: () => draw() });
  const answer = h('p', { class: 'answer', 'aria-live': 'polite' });
  const summary = h('p', { class: 'count' });
  const map = h('ol', { class: 'portmap', 'aria-label': 'Ports of the band' });
  const list = h('div', { class: 'scroll' });
  el.append(h('h2', { text: 'Ports' }),
    h('div', { class: 'controls' }, h('label', { for: 'port-find', text: 'Find a port' }), find),
    answer, summary,
    h('p', { class: 'legend' }, h('span', { class: 'cell free', text: 'free' }), h('span', { class: 'cell leased', text: 'leased' }), h('span', { class: 'cell hit', text: 'found' })),
    map, list);

  function draw() {
    const d = last;
    if (!d) return;
    const err = d.errors.overview || d.errors.leases;
    if (err) { map.replaceChildren(); list.replaceChildren(notice(err.message, 'error')); return; }
    if (!d.overview || !d.leases) { list.replaceChildren(notice('Loading…')); return; }
    const { start, end } = d.overview.band;
    const byPort = new Map(d.leases.map((l) => [l.port, l]));
    const want = Number(find.value.trim());
    const now = Date.now();
    const frag = document.createDocumentFragment();
    for (let p = start; p <= end; p++) {
      const l = byPort.get(p);
      const label = l ? p + ': leased by ' + l.machine + ' for ' + l.purpose : p + ': free';
      frag.append(h('li', { class: 'cell ' + (l ? 'leased' : 'free') + (p === want ? ' hit' : ''), title: label, 'aria-label': label, 'data-port': p, text: String(p % 100).padStart(2, '0') }));
    }
    map.replaceChildren(frag);
    summary.textContent = 'Band ' + start + '–' + end + ': ' + num(end - start + 1) + ' ports, ' + num(byPort.size) + ' leased, ' + num(end - start + 1 - byPort.size) + ' free.';
    if (!find.value.trim()) answer.textContent = '';
    else if (!Number.isInteger(want) || want < start || want > end) answer.textContent = find.value.trim() + ' is not a port of the band ' + start + '–' + end + '.';
    else {
      const l = byPort.get(want);
      answer.textContent = l ? want + ' is leased by ' + l.machine + ' for ' + l.purpose + ', fence ' + l.fence + ', generation ' + l.generation + ', expires in ' + span(l.expiresAt - now) + '.'
        : want + ' is free.';
    }
    const rows = d.leases.slice().sort((a, b) => a.port - b.port).map((l) => h('tr', { class: l.port === want ? 'hit' : '' },
      h('th', { scope: 'row', class: 'n', text: String(l.port) }),
      h('td', { text: l.machine }), h('td', { text: l.purpose }),
      h('td', { class: 'n', text: num(l.fence) }), h('td', { class: 'n', text: num(l.generation) }),
      h('td', { class: 'n', text: span(l.expiresAt - now) })));
    list.replaceChildren(rows.length ? table('Leased ports (' + rows.length + ')', ['Port', 'Machine', 'Purpose', 'Fence', 'Generation', 'Expires in'], rows, 'grid')
      : notice('No port is leased.'));
  }

  return { update(d) { last = d; draw(); } };
}
