// MCP › Servers: the servers of hatchway.yaml's plugins, probed with this organisation's credentials.

import { api } from "../api.js";
import { badge, h, render, table, time } from "../dom.js";

function reachable(server) {
  if (server.reachable === true) return badge("reachable", "ok");
  if (server.reachable === false) return badge("unreachable", "bad");
  return badge("not checked", "warn");
}

function lastError(server) {
  const last = server.last_error;
  if (!last) return "–";
  return h(
    "div",
    {},
    h("a", { href: `#/requests/${last.log_id}` }, time(last.at)),
    " ",
    `${last.step === "list_tools" ? "listing tools" : last.tool}: ${last.message}`,
  );
}

export async function showMcpServers(page) {
  const results = h("div", {});
  const check = h("button", { type: "button", class: "secondary", onclick: () => load() }, "Check again");
  render(page, h("h1", {}, "MCP servers"), h("p", {}, check), results);

  async function load() {
    check.disabled = true;
    try {
      const servers = (await api("/v1/mcp/servers")).data;
      render(
        results,
        table(
          "Servers configured in hatchway.yaml",
          ["Server", "Bound by", "Location", "Auth", "Status", "Tools", "Problem now", "Last failed call"],
          servers,
          (s) => [
            h("strong", {}, s.id),
            s.source,
            h("code", {}, `${s.transport} ${s.location}`),
            s.auth_type,
            reachable(s),
            s.tools ? s.tools.join(", ") : "–",
            s.error ? h("span", { class: "bad" }, s.error) : "–",
            lastError(s),
          ],
          "No MCP servers are configured in hatchway.yaml (plugins of routing rules and agents).",
        ),
      );
    } finally {
      check.disabled = false;
    }
  }
  await load();
}
