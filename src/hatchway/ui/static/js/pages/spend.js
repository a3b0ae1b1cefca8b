// Spend: what the organisation's requests cost, per day and per key, end user, agent or model
// (GET /v1/usage), as bar charts drawn with plain elements and the figures as a table.

import { api } from "../api.js";
import { h, render, table, usd } from "../dom.js";

const GROUPS = [
  ["model", "Model"],
  ["agent", "Agent"],
  ["key", "API key"],
  ["user", "End user"],
];
const PERIODS = [
  [1, "Last 24 hours"],
  [7, "Last 7 days"],
  [30, "Last 30 days"],
  [0, "All records kept"],
];
const DAY = 86400;
const state = { group_by: "model", days: 7 };

const NONE = { key: "(no key)", user: "(no end user)", agent: "(no agent)", model: "–" };

function groupName(groupBy, group) {
  if (groupBy === "key") return group.key_name || group.key || NONE.key;
  return group[groupBy] || NONE[groupBy];
}

/** A group's cost, or null (shown as unknown) when none of its requests had a price. */
function knownCost(group) {
  return group.unpriced_requests && !group.cost_usd ? null : group.cost_usd;
}

function groupLabel(groupBy) {
  return GROUPS.find(([value]) => value === groupBy)[1];
}

/** One bar per item: ``value(item)`` scaled to the largest, labelled with ``label(item)``. */
function bars(title, items, label, value, { vertical = false } = {}) {
  const top = Math.max(...items.map((item) => value(item) || 0), 0);
  const bar = (item) => {
    const share = top ? ((value(item) || 0) / top) * 100 : 0;
    const size = vertical ? { height: `${share}%` } : { width: `${share}%` };
    return h(
      "li",
      { "aria-label": `${label(item)}: ${usd(value(item))}` },
      h("span", { class: "bar-label" }, label(item)),
      h("span", { class: "bar-track", "aria-hidden": "true" }, h("span", { class: "bar", style: size })),
      h("span", { class: "bar-value" }, usd(value(item))),
    );
  };
  return h(
    "figure",
    { class: `chart${vertical ? " columns" : ""}` },
    h("figcaption", {}, title),
    h("ol", { "aria-label": title }, items.map(bar)),
  );
}

function day(seconds) {
  return new Date(seconds * 1000).toISOString().slice(0, 10);
}

async function perDay(days) {
  const today = Math.floor(Date.now() / 1000 / DAY) * DAY;
  const starts = Array.from({ length: days }, (_, i) => today - (days - 1 - i) * DAY);
  const answers = await Promise.all(
    starts.map((since) => api("/v1/usage", { query: { since, until: since + DAY, limit: 1 } })),
  );
  return starts.map((since, i) => ({ day: day(since), cost: answers[i].totals.cost_usd }));
}

function groupTable(answer) {
  const num = (value) => h("td", { class: "num" }, String(value));
  const label = groupLabel(answer.group_by);
  return table(
    `Spend by ${label.toLowerCase()}, the costliest first`,
    [label, "Requests", "Prompt tokens", "Completion tokens", "Cost (USD)", "Unpriced requests"],
    answer.data,
    (g) => [groupName(answer.group_by, g), num(g.requests), num(g.prompt_tokens), num(g.completion_tokens), num(usd(knownCost(g))), num(g.unpriced_requests || "–")],
    "No requests in this period.",
  );
}

export async function showSpend(page) {
  const results = h("div", { id: "spend-results" });
  const select = (id, options, current) =>
    h("select", { id }, options.map(([value, text]) => h("option", { value, selected: String(current) === String(value) }, text)));
  const groupBy = select("s-group", GROUPS, state.group_by);
  const period = select("s-period", PERIODS, state.days);
  const apply = () => {
    state.group_by = groupBy.value;
    state.days = Number(period.value);
    load();
  };
  groupBy.addEventListener("change", apply);
  period.addEventListener("change", apply);
  render(
    page,
    h("h1", {}, "Spend"),
    h("p", { class: "muted" }, "What model calls cost, priced by genai-prices or hatchway.yaml's models[].price; calls of unknown price count as unpriced requests, never as a guess."),
    h(
      "form",
      { class: "filters", "aria-label": "Spend period and grouping", onsubmit: (e) => (e.preventDefault(), apply()) },
      h("div", {}, h("label", { for: "s-group" }, "Group by"), groupBy),
      h("div", {}, h("label", { for: "s-period" }, "Period"), period),
    ),
    results,
  );

  let latest = 0;
  async function load() {
    const mine = ++latest;
    const since = state.days ? Math.floor(Date.now() / 1000) - state.days * DAY : undefined;
    const [answer, daily] = await Promise.all([
      api("/v1/usage", { query: { group_by: state.group_by, since, limit: 50 } }),
      perDay(Math.min(state.days || 30, 30)),
    ]);
    if (mine !== latest) return; // a later choice's answer is (or will be) shown instead
    const totals = answer.totals;
    const by = answer.group_by;
    render(
      results,
      h(
        "p",
        { class: "spend-total" },
        h("strong", {}, usd(totals.cost_usd)),
        ` over ${totals.requests} requests and ${totals.total_tokens} tokens`,
        totals.unpriced_requests ? h("span", { class: "warn" }, ` · ${totals.unpriced_requests} unpriced`) : "",
      ),
      bars("Spend per day (UTC)", daily, (d) => d.day, (d) => d.cost, { vertical: true }),
      answer.data.length ? bars(`Spend by ${groupLabel(by).toLowerCase()}`, answer.data, (g) => groupName(by, g), knownCost) : "",
      groupTable(answer),
    );
  }
  await load();
}
