// MCP › Servers: the servers of hatchway.yaml's plugins, probed with this organisation's credentials.
// MCP › Endpoints: the mcp_endpoints this organisation may use, their tools now and their recent calls.

import { api } from "../api.js";
import { badge, h, ms, render, table, time } from "../dom.js";

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

function outcome(call) {
  if (call.outcome === "ok" || call.outcome === "SUCCESS") return badge(call.outcome, "ok");
  if (call.outcome === "error" || call.outcome === "timeout" || call.outcome === "FAILED") return badge(call.outcome, "bad");
  return badge(call.outcome || "–", "warn");
}

function operationOf(call) {
  if (!call.operation_id) return "–";
  const status = call.verdict || call.operation_status;
  return h("span", {}, h("code", {}, call.operation_id), status ? ` ${status}` : "");
}

function tools(endpoint) {
  if (endpoint.tools_error) return h("p", { class: "bad" }, `Its tools could not be listed: ${endpoint.tools_error}`);
  return table(
    `Tools of ${endpoint.name}`,
    ["Tool", "Description", "Kind"],
    endpoint.tools,
    (t) => [h("code", {}, t.name), t.description || "–", t.operation ? badge("operation", "warn") : "tool"],
    "This endpoint serves no tool to this organisation now.",
  );
}

function recentCalls(endpoint) {
  return table(
    `Recent calls to ${endpoint.name}, newest first`,
    ["Time", "Tool", "Outcome", "Duration", "On behalf of", "Operation"],
    endpoint.recent_calls,
    (c) => [
      h("a", { href: `#/requests/${c.log_id}`, "aria-label": `Open run ${c.log_id}` }, time(c.at)),
      h("code", {}, c.tool || "–"),
      outcome(c),
      h("td", { class: "num" }, ms(c.duration_ms)),
      c.on_behalf_of || "–",
      operationOf(c),
    ],
    "No calls through this endpoint yet.",
  );
}

function endpointCard(endpoint) {
  const allowed = endpoint.allowed_tools === "*" ? "all" : endpoint.allowed_tools.join(", ");
  const flag = (on) => (on ? "yes" : "no");
  return h(
    "article",
    { class: "card op", "aria-labelledby": `endpoint-${endpoint.name}` },
    h("h2", { id: `endpoint-${endpoint.name}` }, `${endpoint.name} `, h("code", {}, endpoint.path)),
    h(
      "dl",
      { class: "summary" },
      h("dt", {}, "Tools of"), h("dd", {}, endpoint.source),
      h("dt", {}, "Allowlist"), h("dd", {}, allowed),
      h("dt", {}, "Namespaced names"), h("dd", {}, flag(endpoint.namespace)),
      h("dt", {}, "Resources"), h("dd", {}, flag(endpoint.resources)),
      h("dt", {}, "Prompts"), h("dd", {}, flag(endpoint.prompts)),
    ),
    tools(endpoint),
    recentCalls(endpoint),
  );
}

export async function showMcpEndpoints(page) {
  const results = h("div", {});
  const check = h("button", { type: "button", class: "secondary", onclick: () => load() }, "Check again");
  render(
    page,
    h("h1", {}, "MCP endpoints"),
    h("p", { class: "muted" }, "The virtual MCP servers Hatchway serves at /mcp/<name> (mcp_endpoints) that this organisation may use."),
    h("p", {}, check),
    results,
  );

  async function load() {
    check.disabled = true;
    try {
      const endpoints = (await api("/v1/mcp/endpoints")).data;
      render(
        results,
        endpoints.length
          ? endpoints.map(endpointCard)
          : h("p", { class: "empty" }, "No MCP endpoint of hatchway.yaml is open to this organisation."),
      );
    } finally {
      check.disabled = false;
    }
  }
  await load();
}
