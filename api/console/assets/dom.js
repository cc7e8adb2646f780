// Small DOM helpers: h() builds elements without innerHTML (text is always
// text), and the formatters every view shares.

export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

export const num = (n) => Number(n || 0).toLocaleString('en-US');

export function clock(ms) {
  if (!ms) return '-';
  return new Date(ms).toLocaleTimeString('en-GB', { hour12: false });
}

export function dateTime(ms) {
  if (!ms) return '-';
  const d = new Date(ms);
  return d.toLocaleDateString('en-CA') + ' ' + d.toLocaleTimeString('en-GB', { hour12: false });
}

// span renders a duration in ms as "4m 12s", "812 ms", "2h 3m".
export function span(ms) {
  if (ms === null || ms === undefined) return '-';
  if (ms < 0) return 'expired';
  if (ms < 1000) return Math.round(ms) + ' ms';
  let s = Math.round(ms / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hh = Math.floor(s / 3600); s -= hh * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return d + 'd ' + hh + 'h';
  if (hh) return hh + 'h ' + m + 'm';
  if (m) return m + 'm ' + s + 's';
  return s + 's';
}

export function bytes(n) {
  if (!n) return '0 B';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
}

export function table(caption, heads, rows, cls) {
  return h('table', { class: cls },
    h('caption', { text: caption }),
    h('thead', {}, h('tr', {}, heads.map((t) => h('th', { scope: 'col', text: t })))),
    h('tbody', {}, rows));
}

// notice is a view's message in place of its data.
export function notice(text, kind) {
  return h('p', { class: 'notice ' + (kind || ''), role: kind === 'error' ? 'alert' : null, text });
}
