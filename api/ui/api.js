// The service's public REST API as the dashboard calls it: the typed bearer token, kept in
// this tab's session storage, and errors that carry the HTTP status and the API's detail.

const TOKEN_KEY = "interstice.token";

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

export function savedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function saveToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// One line of an error detail: a string, or FastAPI's list of {loc, msg} (422).
function detailText(detail) {
  if (Array.isArray(detail)) {
    return detail.map((e) => `${(e.loc || []).filter((p) => p !== "body").join(".")}: ${e.msg}`).join("; ");
  }
  return typeof detail === "string" ? detail : JSON.stringify(detail);
}

export async function call(method, path, body) {
  const headers = { Authorization: `Bearer ${savedToken() || ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, detailText(data?.detail ?? response.statusText));
  return data;
}

export const get = (path) => call("GET", path);

// Every item of a paged list (GET /v1/nodes): the `data` of each page, following
// `next_cursor` until it is null.
export async function getAll(path) {
  const items = [];
  let cursor = null;
  do {
    const separator = path.includes("?") ? "&" : "?";
    const page = await get(cursor === null ? path : `${path}${separator}cursor=${encodeURIComponent(cursor)}`);
    items.push(...page.data);
    cursor = page.next_cursor;
  } while (cursor !== null && cursor !== undefined);
  return items;
}

// A time `seconds` ago as the API's `since` parameter (ISO 8601, UTC).
export function sinceAgo(seconds) {
  return new Date(Date.now() - seconds * 1000).toISOString();
}
