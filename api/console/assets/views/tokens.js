// Tokens: the machines that hold a machine token, with when it was issued
// (GET /v1/tokens/member, admin scope). Never a token or a hash.
import { h, table, notice } from '../dom.js';

export const needs = ['tokens'];

export function mount(el) {
  const body = h('div');
  el.append(h('h2', { text: 'Tokens' }), body);
  return {
    update(d) {
      const err = d.errors.tokens;
      if (err && err.status === 403) {
        body.replaceChildren(notice('This view needs an admin token; the token in use is not one (the server said: ' + err.message + '). Forget the token and give the admin token to see it.', 'need-admin'));
        return;
      }
      if (err) { body.replaceChildren(notice(err.message, 'error')); return; }
      if (!d.tokens) { body.replaceChildren(notice('Loading…')); return; }
      const rows = d.tokens.slice().sort((a, b) => a.machine.localeCompare(b.machine))
        .map((t) => h('tr', {}, h('th', { scope: 'row', text: t.machine }), h('td', { text: t.issuedAt })));
      body.replaceChildren(rows.length ? table('Machines holding a token (' + rows.length + ')', ['Machine', 'Issued at'], rows, 'grid')
        : notice('No machine token has been issued.'));
    },
  };
}
