// The dashboard shell: sign-in (an API key, or SSO when the gateway offers it), the organisation
// picker of a person with several, navigation (hash routes) and the page modules.

import { api, ApiError, forgetPerson, loadPerson, session, signOutPerson, ssoOffered } from "./api.js";
import { h, render } from "./dom.js";
import { showApproval, showApprovals } from "./pages/approvals.js";
import { showAudit } from "./pages/audit.js";
import { showConnections } from "./pages/connections.js";
import { showKeys } from "./pages/keys.js";
import { showMcpEndpoints, showMcpServers } from "./pages/mcp.js";
import { showOperations } from "./pages/operations.js";
import { showPins } from "./pages/pins.js";
import { showRequests, showRun } from "./pages/requests.js";
import { showResponses } from "./pages/responses.js";
import { showSecrets } from "./pages/secrets.js";
import { showSpend } from "./pages/spend.js";

const routes = [
  [/^#\/requests\/([\w-]+)$/, "requests", (page, id) => showRun(page, id)],
  [/^#\/requests$/, "requests", showRequests],
  [/^#\/spend$/, "spend", showSpend],
  [/^#\/operations$/, "operations", showOperations],
  [/^#\/approvals\/([\w-]+)$/, "approvals", (page, id) => showApproval(page, id)],
  [/^#\/approvals$/, "approvals", showApprovals],
  [/^#\/secrets$/, "secrets", showSecrets],
  [/^#\/keys$/, "keys", showKeys],
  [/^#\/audit$/, "audit", showAudit],
  [/^#\/mcp$/, "mcp", showMcpServers],
  [/^#\/mcp-endpoints$/, "mcp-endpoints", showMcpEndpoints],
  [/^#\/connections$/, "connections", showConnections],
  [/^#\/pins$/, "pins", showPins],
  [/^#\/responses$/, "responses", showResponses],
];

const $ = (id) => document.getElementById(id);

function signedIn(yes) {
  $("sign-in").hidden = yes;
  $("nav").hidden = !yes;
  $("sign-out").hidden = !yes;
  $("page").hidden = !yes;
  showPerson();
}

/** Who is signed in with SSO, and the organisation picker when they may act in several. */
function showPerson() {
  const person = session.key() ? null : session.person();
  const organizations = person?.organizations || [];
  $("who").hidden = !person;
  $("who").textContent = person ? `Signed in as ${person.name || person.subject}` : "";
  $("org-picker-field").hidden = organizations.length < 2;
  const current = session.organization();
  render(
    $("org-picker"),
    organizations.map((o) => h("option", { value: o.id, selected: o.id === current }, `${o.name} (${o.role})`)),
  );
}

async function route() {
  if (!session.signedIn()) {
    signedIn(false);
    $("sso-button").href = `/ui/login?next=${encodeURIComponent(`/ui/${window.location.hash}`)}`;
    $("api-key").focus();
    return;
  }
  signedIn(true);
  const hash = window.location.hash || "#/requests";
  const found = routes.find(([pattern]) => pattern.test(hash));
  if (!found) {
    window.location.hash = "#/requests";
    return;
  }
  const [pattern, name, show] = found;
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.page === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const page = $("page");
  render(page, h("p", { class: "muted" }, "Loading…"));
  try {
    await show(page, ...hash.match(pattern).slice(1));
  } catch (error) {
    render(page, h("p", { class: "error", role: "alert" }, `Could not load this page: ${error.message}`));
  }
}

$("sign-in-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const key = $("api-key").value.trim();
  $("sign-in-error").textContent = "";
  try {
    await api("/v1/logs", { query: { limit: 1 }, key });
  } catch (error) {
    $("sign-in-error").textContent =
      error instanceof ApiError && error.status === 401 ? "That API key was not accepted." : `Sign-in failed: ${error.message}`;
    return;
  }
  session.signIn(key);
  $("api-key").value = "";
  if (!window.location.hash) window.location.hash = "#/requests";
  route();
});

$("sign-out").addEventListener("click", async () => {
  if (session.key()) session.signOut();
  else await signOutPerson();
  route();
});

$("org-picker").addEventListener("change", (event) => {
  session.pickOrganization(event.target.value);
  route();
});

window.addEventListener("hatchway:unauthorized", () => {
  const wasPerson = !session.key() && session.person();
  session.signOut();
  forgetPerson();
  route();
  $("sign-in-error").textContent = wasPerson
    ? "Your session has ended; sign in again."
    : "Your key is no longer accepted; sign in again.";
});
window.addEventListener("hashchange", route);

async function start() {
  const [offered] = await Promise.all([ssoOffered().catch(() => false), loadPerson().catch(() => null)]);
  $("sso-sign-in").hidden = !offered;
  route();
}
start();
