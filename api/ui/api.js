// Calls to the REST API. The operator's token lives in sessionStorage (this
// tab only, gone when it closes) and travels only in the Authorization
// header, never in a URL. A 401 clears it and sends the console to the login.

const TOKEN_KEY = 'cronshard.console.token';

export const session = {
  token() {
    return sessionStorage.getItem(TOKEN_KEY);
  },
  set(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
  },
};

/** An error answer (problem+json), or no answer at all (status 0). */
export class ApiError extends Error {
  constructor(status, problem, path) {
    const p = problem && typeof problem === 'object' ? problem : {};
    super(p.detail || p.title || (status ? `HTTP ${status}` : 'no answer'));
    this.status = status;
    this.problem = p;
    this.path = path;
  }

  /** The 422's `errors: [{field, message}]`. */
  get fieldErrors() {
    return Array.isArray(this.problem.errors) ? this.problem.errors : [];
  }

  /** A route this server does not have (yet): render without it. */
  get unavailable() {
    return this.status === 404 || this.status === 405 || this.status === 501;
  }
}

/**
 * One request. `body` is sent as JSON (`contentType` overrides the media
 * type, e.g. a merge patch); `token` tries a token without storing it.
 * Resolves to {data, headers, status}; rejects with ApiError.
 */
export async function request(method, path, { body, headers = {}, contentType = 'application/json', signal, token } = {}) {
  const h = { accept: 'application/json, application/problem+json', ...headers };
  const bearer = token ?? session.token();
  if (bearer) h.authorization = `Bearer ${bearer}`;
  let payload;
  if (body !== undefined) {
    h['content-type'] = contentType;
    payload = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, { method, headers: h, body: payload, signal, cache: 'no-store', credentials: 'omit', redirect: 'error' });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, { title: 'No answer', detail: `the API did not answer: ${e.message}` }, path);
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { detail: text.slice(0, 300) };
    }
  }
  if (res.status === 401 && token === undefined) {
    session.clear();
    window.dispatchEvent(new CustomEvent('cronshard:unauthorized'));
  }
  if (!res.ok) throw new ApiError(res.status, data, path);
  return { data, headers: res.headers, status: res.status };
}

export async function get(path, opts) {
  return (await request('GET', path, opts)).data;
}

export async function post(path, body, opts = {}) {
  return (await request('POST', path, { ...opts, body })).data;
}

/** A GET of a route that may not exist on this server yet: null when it does not. */
export async function getOptional(path, opts) {
  try {
    return await get(path, opts);
  } catch (e) {
    if (e instanceof ApiError && e.unavailable) return null;
    throw e;
  }
}

/** `?a=1&b=2` of the parameters that have a value. */
export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') u.set(k, String(v));
  }
  const s = u.toString();
  return s ? `?${s}` : '';
}

/** A path segment. */
export const seg = (s) => encodeURIComponent(s);
