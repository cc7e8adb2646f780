// The event stream client: GET /v1/events read with fetch() and a
// ReadableStream, because EventSource cannot send the Authorization header.
// It parses text/event-stream, resumes with Last-Event-ID after a drop, and
// calls back:
//   onOpen()              connected (the caller re-reads what it shows)
//   onEvent(type, data)   one event; type "reset" means events were missed
//   onUnavailable()       the server has no stream (404): poll instead
//   onAuth(err)           401/403 with the server's message
//   onDown(err)           dropped; it reconnects by itself

import { ApiError, authHeaders } from './api.js';

export function openStream(cb) {
  let ctrl = null;
  let lastId = '';
  let closed = false;
  let backoff = 1000;
  let retry = 0;

  async function run() {
    ctrl = new AbortController();
    const headers = authHeaders({ Accept: 'text/event-stream' });
    if (lastId) headers['Last-Event-ID'] = lastId;
    let r;
    try {
      r = await fetch('/v1/events', { headers, cache: 'no-store', signal: ctrl.signal });
    } catch (e) {
      return again(e);
    }
    if (r.status === 404) { cb.onUnavailable(); return; }
    if (r.status === 401 || r.status === 403) {
      let body = {};
      try { body = await r.json(); } catch { /* not JSON */ }
      cb.onAuth(new ApiError(r.status, body.error || '', body.message || r.statusText));
      return;
    }
    if (!r.ok || !r.body) {
      try { await r.body?.cancel(); } catch { /* gone */ }
      return again(new Error('HTTP ' + r.status));
    }
    backoff = 1000;
    cb.onOpen();
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let ev = { type: '', data: [], id: null };
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        const lines = buf.split(/\r\n|\r|\n/);
        buf = lines.pop();
        for (const line of lines) {
          if (line === '') {
            if (ev.id !== null) lastId = ev.id;
            if (ev.data.length || ev.type) dispatch(ev);
            ev = { type: '', data: [], id: null };
            continue;
          }
          if (line.startsWith(':')) continue; // comment, keep-alive
          const i = line.indexOf(':');
          const field = i < 0 ? line : line.slice(0, i);
          let val = i < 0 ? '' : line.slice(i + 1);
          if (val.startsWith(' ')) val = val.slice(1);
          if (field === 'event') ev.type = val;
          else if (field === 'data') ev.data.push(val);
          else if (field === 'id') ev.id = val;
          else if (field === 'retry' && /^\d+$/.test(val)) backoff = Math.max(1000, Number(val));
        }
      }
    } catch (e) {
      return again(e);
    }
    again(new Error('the stream ended'));
  }

  function dispatch(ev) {
    let data = ev.data.join('\n');
    try { data = JSON.parse(data); } catch { /* not JSON */ }
    // A reset's id is the index the stream goes on after: kept as the resume
    // point, while the caller re-reads everything.
    cb.onEvent(ev.type || 'message', data);
  }

  function again(err) {
    if (closed || (err && err.name === 'AbortError')) return;
    cb.onDown(err);
    retry = setTimeout(run, backoff);
    backoff = Math.min(backoff * 2, 8000);
  }

  run();
  return {
    close() {
      closed = true;
      clearTimeout(retry);
      if (ctrl) ctrl.abort();
    },
  };
}
