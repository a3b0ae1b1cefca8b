// The /v1 API, called with the API key the user signed in with (kept in sessionStorage).

const KEY = "hatchway.api_key";

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

export const session = {
  key: () => sessionStorage.getItem(KEY),
  signIn: (key) => sessionStorage.setItem(KEY, key),
  signOut: () => sessionStorage.removeItem(KEY),
};

/** Call ``path`` (``/v1/…``); ``query`` entries that are empty are left out. */
export async function api(path, { method = "GET", query = {}, body, key = session.key(), onBehalfOf } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const headers = { authorization: `Bearer ${key}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (onBehalfOf) headers["x-on-behalf-of"] = onBehalfOf;
  const response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const payload = await response.json().catch(() => null);
  if (!response.ok) {
    if (response.status === 401) window.dispatchEvent(new CustomEvent("hatchway:unauthorized"));
    throw new ApiError(response.status, payload);
  }
  return payload;
}
