// Observability › Requests: the run log, filterable, and one run's steps as a waterfall.

import { api } from "../api.js";
import { badge, h, ms, render, table, time, usd } from "../dom.js";
import { waterfall } from "../waterfall.js";

const filters = { has_tool_calls: "", status: "", model: "", on_behalf_of: "" };

function statusBadge(record) {
  return record.status === "ok" ? badge("ok", "ok") : badge(`error ${record.http_status}`, "bad");
}

function toolCount(record) {
  return record.steps.filter((s) => s.type === "tool_call").length;
}

function row(record) {
  return [
    h("a", { href: `#/requests/${record.id}`, "aria-label": `Open run ${record.id}` }, time(record.created_at)),
    record.model || "–",
    statusBadge(record),
    (record.finish_reason || "–") + (record.max_rounds_hit ? " (max_rounds)" : ""),
    h("td", { class: "num" }, String(record.rounds)),
    h("td", { class: "num" }, record.has_tool_calls ? String(toolCount(record)) : "–"),
    h("td", { class: "num" }, String(record.usage.total_tokens)),
    h("td", { class: "num" }, ms(record.latency_ms)),
    record.on_behalf_of || "–",
  ];
}

const HEADERS = ["Time", "Model", "Status", "Finish", "Rounds", "Tool calls", "Tokens", "Latency", "On behalf of"];

function filterForm(onApply) {
  const field = (id, label, input) => h("div", {}, h("label", { for: id }, label), input);
  const toolsOnly = h("input", { id: "f-tools", type: "checkbox", checked: filters.has_tool_calls === "true" });
  const status = h(
    "select",
    { id: "f-status" },
    [["", "Any"], ["ok", "ok"], ["error", "error"]].map(([value, text]) =>
      h("option", { value, selected: filters.status === value }, text),
    ),
  );
  const model = h("input", { id: "f-model", value: filters.model, placeholder: "gpt-4o or agent:name" });
  const user = h("input", { id: "f-user", value: filters.on_behalf_of });
  const apply = () => {
    filters.has_tool_calls = toolsOnly.checked ? "true" : "";
    filters.status = status.value;
    filters.model = model.value.trim();
    filters.on_behalf_of = user.value.trim();
    onApply();
  };
  toolsOnly.addEventListener("change", apply);
  return h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter requests", onsubmit: (e) => (e.preventDefault(), apply()) },
    h("div", { class: "check" }, toolsOnly, " ", h("label", { for: "f-tools" }, "Only runs with tool calls")),
    field("f-status", "Status", status),
    field("f-model", "Model", model),
    field("f-user", "On behalf of", user),
    h("button", { type: "submit" }, "Apply filters"),
  );
}

export async function showRequests(page) {
  const results = h("div", { id: "requests-results" });
  render(page, h("h1", {}, "Requests"), filterForm(() => load()), results);

  async function load(after) {
    const list = await api("/v1/logs", { query: { ...filters, after, limit: 50 } });
    const rows = after ? [...load.rows, ...list.data] : list.data;
    load.rows = rows;
    const more = list.has_more
      ? h("button", { type: "button", class: "secondary", onclick: () => load(list.last_id) }, "Load more")
      : null;
    render(results, table("Request log, newest first", HEADERS, rows, row, "No requests match these filters."), more);
  }
  await load();
}

function summary(record) {
  const item = (term, value) => [h("dt", {}, term), h("dd", {}, value)];
  const links = [];
  if (record.parent_id) links.push(item("Parent response", h("code", {}, record.parent_id)));
  if (record.links.children.length) links.push(item("Subagent responses", record.links.children.map((c) => h("div", {}, h("code", {}, c)))));
  if (record.links.operations.length) {
    links.push(item("Operations", record.links.operations.map((o) => h("div", {}, h("a", { href: "#/operations" }, o)))));
  }
  return h(
    "dl",
    { class: "summary" },
    item("Status", [statusBadge(record), record.error ? h("span", { class: "bad" }, ` ${record.error}`) : ""]),
    item("Model", record.model || "–"),
    item("Agent", record.agent || "–"),
    item("Plugin", record.plugin_source || "–"),
    item("Key", record.key_name || "–"),
    item("On behalf of", record.on_behalf_of || "–"),
    item("Finish reason", record.finish_reason || "–"),
    item("Rounds", `${record.rounds}${record.max_rounds_hit ? " (max_rounds reached)" : ""}`),
    item("Tokens", `${record.usage.prompt_tokens} in · ${record.usage.completion_tokens} out · ${record.usage.total_tokens} total`),
    item("Cost", record.cost_usd === null ? "unknown (a model call of unknown price)" : usd(record.cost_usd)),
    item("Latency", ms(record.latency_ms)),
    item("Response", record.response_id ? h("code", {}, record.response_id) : "–"),
    links,
  );
}

export async function showRun(page, id) {
  const record = await api(`/v1/logs/${encodeURIComponent(id)}`);
  render(
    page,
    h("p", {}, h("a", { href: "#/requests" }, "← All requests")),
    h("h1", {}, "Run ", h("code", {}, record.id)),
    h("section", { class: "card", "aria-label": "Run summary" }, summary(record)),
    h("h2", { id: "steps-title" }, "Steps"),
    waterfall(record.steps, "steps-title"),
  );
}
