// Connections: the end users' per-user OAuth connections to MCP servers (never a token); revoke one.

import { api } from "../api.js";
import { announce, h, render, table, time } from "../dom.js";

export async function showConnections(page) {
  const list = h("div", {});
  const error = h("p", { class: "error", role: "alert" });

  async function revoke(c) {
    if (!window.confirm(`Revoke ${c.user}'s connection to ${c.server}? Their next call asks them to connect again.`)) return;
    error.textContent = "";
    try {
      await api(`/v1/connections/${encodeURIComponent(c.server)}`, { method: "DELETE", onBehalfOf: c.user });
    } catch (e) {
      error.textContent = e.message;
      return;
    }
    announce(`${c.user}'s connection to ${c.server} revoked`);
    await load();
  }

  async function load() {
    const found = await api("/v1/connections");
    render(
      list,
      table("End users' connections (tokens are never shown)", ["User", "Server", "Scopes", "Token expires", "Connected", ""], found.data, (c) => [
        c.user,
        h("code", {}, c.server),
        c.scopes.length ? c.scopes.join(" ") : "–",
        c.expires_at ? time(c.expires_at) : "–",
        time(c.connected_at),
        h("button", { type: "button", class: "danger", onclick: () => revoke(c), "aria-label": `Revoke ${c.user}'s connection to ${c.server}` }, "Revoke"),
      ], "No end user has connected a server yet."),
    );
  }

  render(
    page,
    h("h1", {}, "Connections"),
    h("p", { class: "muted" }, "Servers with grant: authorization_code are reached as each end user; these are their authorizations."),
    error,
    list,
  );
  await load();
}
