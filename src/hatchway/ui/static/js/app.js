// The dashboard shell: sign-in, navigation (hash routes) and the page modules.

import { api, ApiError, session } from "./api.js";
import { h, render } from "./dom.js";
import { showConnections } from "./pages/connections.js";
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
  [/^#\/secrets$/, "secrets", showSecrets],
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
}

async function route() {
  if (!session.key()) {
    signedIn(false);
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

$("sign-out").addEventListener("click", () => {
  session.signOut();
  route();
});

window.addEventListener("hatchway:unauthorized", () => {
  session.signOut();
  route();
  $("sign-in-error").textContent = "Your key is no longer accepted; sign in again.";
});
window.addEventListener("hashchange", route);
route();
