// The /v1 API, called with the API key the user signed in with (kept in sessionStorage), or with the
// HttpOnly session cookie of a person signed in with SSO: then the session's CSRF token goes with
// every change and the organisation picked goes in Hatchway-Organization.

const KEY = "hatchway.api_key";
const ORG = "hatchway.organization";
const CHANGES = new Set(["POST", "PUT", "PATCH", "DELETE"]);
let person = null; // GET /ui/session's answer while signed in with SSO

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
  person: () => person,
  signedIn: () => Boolean(sessionStorage.getItem(KEY) || person),
  /** The organisation a person acts in: the one picked, else their first. */
  organization() {
    const organizations = person?.organizations || [];
    const picked = sessionStorage.getItem(ORG);
    return organizations.some((o) => o.id === picked) ? picked : organizations[0]?.id || null;
  },
  pickOrganization: (id) => sessionStorage.setItem(ORG, id),
};

/** Whether the gateway offers SSO (``/ui/config.json``). */
export async function ssoOffered() {
  const response = await fetch("/ui/config.json", { credentials: "same-origin" });
  return response.ok && (await response.json()).sso === true;
}

/** The person signed in with SSO (``GET /ui/session``), or null. */
export async function loadPerson() {
  const response = await fetch("/ui/session", { credentials: "same-origin" });
  person = response.ok ? await response.json() : null;
  return person;
}

/** End the SSO session on the gateway (every replica refuses the cookie from now on). */
export async function signOutPerson() {
  if (!person) return;
  const csrf = person.csrf_token;
  person = null;
  await fetch("/ui/logout", { method: "POST", credentials: "same-origin", headers: { "x-csrf-token": csrf } });
}

export function forgetPerson() {
  person = null;
}

/** Call ``path`` (``/v1/…``); ``query`` entries that are empty are left out. */
export async function api(path, { method = "GET", query = {}, body, key = session.key(), onBehalfOf } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const headers = {};
  if (key) headers.authorization = `Bearer ${key}`;
  else if (person) {
    const organization = session.organization();
    if (organization) headers["hatchway-organization"] = organization;
    if (CHANGES.has(method)) headers["x-csrf-token"] = person.csrf_token;
  }
  if (body !== undefined) headers["content-type"] = "application/json";
  if (onBehalfOf) headers["x-on-behalf-of"] = onBehalfOf;
  const response = await fetch(url, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const payload = await response.json().catch(() => null);
  if (!response.ok) {
    if (response.status === 401) window.dispatchEvent(new CustomEvent("hatchway:unauthorized"));
    throw new ApiError(response.status, payload);
  }
  return payload;
}
