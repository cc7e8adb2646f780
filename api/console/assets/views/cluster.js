// Cluster: every candidate's Raft view (GET /v1/cluster/overview), as the
// node serving the console gathered it.
import { h, num, clock, span, table, notice } from '../dom.js';

export const needs = ['overview'];

export function mount(el) {
  const head = h('p', { class: 'viewed' });
  const body = h('div');
  el.append(h('h2', { text: 'Cluster' }), head, body);
  return {
    update(d) {
      if (d.errors.overview) { body.replaceChildren(notice(d.errors.overview.message, 'error')); return; }
      const o = d.overview;
      if (!o) { body.replaceChildren(notice('Loading…')); return; }
      head.replaceChildren('Viewed from ', h('strong', { text: o.viewedFrom }), ', as of ' + clock(o.asOf),
        o.stale ? h('span', { class: 'badge warn', title: 'this node lags the leader or knows none', text: 'stale' }) : '');
      const rows = o.candidates.map((c) => {
        const role = c.reachable ? c.state : 'unreachable';
        return h('tr', { class: c.reachable ? (c.state === 'Leader' ? 'leader' : '') : 'down', 'data-machine': c.machine },
          h('th', { scope: 'row' }, c.machine, h('br'), h('small', { text: c.url })),
          h('td', {}, h('span', { class: 'badge ' + roleClass(role), text: role })),
          h('td', { text: c.reachable ? 'yes' : 'no' }),
          h('td', { text: c.reachable ? (c.ready ? 'yes' : 'no') : '-' }),
          h('td', { class: 'n', text: c.reachable ? num(c.generation) + ' / ' + num(c.term) : '-' }),
          h('td', { class: 'n', text: c.reachable ? num(c.lastIndex) : '-' }),
          h('td', { class: 'n', text: c.reachable ? num(c.commitIndex) : '-' }),
          h('td', { class: 'n', text: c.reachable ? num(c.appliedIndex) : '-' }),
          h('td', { class: 'n', text: c.reachable ? num(c.lag) : '-' }),
          h('td', { class: 'n', text: !c.reachable ? '-' : c.lastContactMs < 0 ? 'never' : c.lastContactMs === 0 ? 'leader' : span(c.lastContactMs) }),
          h('td', { text: c.suffrage === 'voter' ? 'voter' : c.suffrage === 'nonvoter' ? 'non-voter' : c.suffrage || '-' }),
          h('td', { text: c.version || '-' }),
          h('td', { class: 'why', text: c.error || '' }));
      });
      body.replaceChildren(
        h('p', { class: 'primary-line' }, 'Primary: ', h('strong', { text: o.primary.holder || 'unknown' }),
          o.primary.generation ? ', generation ' + num(o.primary.generation) : '',
          o.primary.known ? '' : h('span', { class: 'badge warn', text: 'not confirmed' })),
        h('div', { class: 'scroll' }, table('Candidates (' + o.candidates.length + ')',
          ['Candidate', 'Role', 'Reachable', 'Ready', 'Generation / term', 'Last index', 'Commit', 'Applied', 'Lag', 'Last contact', 'Suffrage', 'Version', 'Problem'],
          rows, 'grid')));
    },
  };
}

function roleClass(role) {
  if (role === 'Leader') return 'good';
  if (role === 'Follower') return 'plain';
  return 'bad';
}
