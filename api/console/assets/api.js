// The console's API client: the token kept in sessionStorage (never in a
// URL or a cookie) and sent in the Authorization header of each request.

const KEY = 'elanous.token';

// takeFragmentToken moves a token given as /ui/<view>#token=<hex> into
// sessionStorage and removes it from the address bar and the history entry.
export function takeFragmentToken() {
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return;
  let t = m[1];
  try { t = decodeURIComponent(t).trim(); } catch { /* not percent-encoded: as is */ }
  if (t) sessionStorage.setItem(KEY, t);
  history.replaceState(history.state, '', location.pathname + location.search);
}

export const token = () => sessionStorage.getItem(KEY) || '';
export const setToken = (t) => sessionStorage.setItem(KEY, t.trim());
export const forgetToken = () => sessionStorage.removeItem(KEY);

// ApiError is a non-2xx answer with the server's {error, message}.
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  get auth() { return this.status === 401 || this.status === 403; }
}

export function authHeaders(extra) {
  return Object.assign({ Authorization: 'Bearer ' + token() }, extra);
}

// get fetches path as JSON; a non-2xx answer throws ApiError, a network
// failure ApiError with status 0.
export async function get(path, signal) {
  let r;
  try {
    r = await fetch(path, { headers: authHeaders({ Accept: 'application/json' }), cache: 'no-store', signal });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'unreachable', 'the node did not answer (' + e.message + ')');
  }
  if (!r.ok) {
    let body = {};
    try { body = await r.json(); } catch { /* not JSON */ }
    throw new ApiError(r.status, body.error || '', body.message || r.statusText || 'HTTP ' + r.status);
  }
  return r.json();
}
