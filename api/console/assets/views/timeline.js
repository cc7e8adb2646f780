// Timeline: the last primary changes and membership changes, kept in the
// replicated state (GET /v1/cluster/timeline), newest first.
import { h, num, dateTime, notice } from '../dom.js';

export const needs = ['timeline'];

const words = {
  'candidate-added': (e) => e.machine + ' was added as a ' + (e.voter ? 'voter' : 'non-voter'),
  'candidate-removed': (e) => e.machine + ' was removed',
  'candidate-promoted': (e) => e.machine + ' was promoted to voter',
  'candidate-demoted': (e) => e.machine + ' was demoted to non-voter',
  'candidate-updated': (e) => e.machine + "'s addresses changed",
};

export function mount(el) {
  const body = h('div');
  el.append(h('h2', { text: 'Timeline' }), body);
  return {
    update(d) {
      const err = d.errors.timeline;
      if (err && err.status === 404) { body.replaceChildren(notice('This node does not serve the timeline (GET /v1/cluster/timeline).')); return; }
      if (err) { body.replaceChildren(notice(err.message, 'error')); return; }
      const t = d.timeline;
      if (!t) { body.replaceChildren(notice('Loading…')); return; }
      let gen = 0;
      const items = (t.entries || []).map((e) => {
        if (e.kind === 'primary') gen = e.generation;
        const what = e.kind === 'primary'
          ? [h('strong', { text: e.holder }), ' became primary, generation ' + num(e.generation)]
          : (words[e.kind] || ((x) => x.kind + ' ' + (x.machine || '')))(e);
        return h('li', { class: 'entry ' + (e.kind === 'primary' ? 'claim' : 'member'), 'data-generation': String(gen), 'data-kind': e.kind },
          h('time', { datetime: new Date(e.time).toISOString(), text: dateTime(e.time) }), ' ',
          h('span', {}, what), ' ', h('small', { text: 'index ' + num(e.index) }));
      }).reverse();
      body.replaceChildren(
        h('p', { class: 'count', text: num(items.length) + ' entries (format ' + t.format + '), newest first' }),
        items.length ? h('ol', { class: 'timeline', 'aria-label': 'Timeline, newest first' }, items)
          : notice('No entry yet: the cluster keeps a timeline from format level 4 on.'));
    },
  };
}
