// Operations: pending confirmations with Confirm / Cancel, and finished ones with their verdict.

import { api } from "../api.js";
import { announce, badge, h, render, table, time } from "../dom.js";

const STATUSES = ["", "AWAITING_CONFIRMATION", "COMPLETED", "CANCELLED", "FAILED", "INTERRUPTED", "OUT_OF_SCOPE", "EXECUTING"];
let statusFilter = "";

function verdictBadge(op) {
  const verdict = op.verdict?.status;
  if (!verdict) return "–";
  const kind = verdict === "SUCCESS" ? "ok" : verdict === "FAILED" ? "bad" : "warn";
  return badge(verdict, kind);
}

function items(op) {
  const list = op.items?.length ? op.items : op.resolved_arguments?.items || [];
  if (!list.length) return null;
  return table(`Items of ${op.id}`, ["Item", "Outcome", "Detail"], list, (item) => [
    item.name || item.id || `#${item.index ?? ""}`,
    item.success === true ? badge("succeeded", "ok") : item.success === false ? badge("failed", "bad") : op.items?.length ? badge("unknown", "warn") : "pending",
    item.error || item.message || "",
  ]);
}

function card(op, reload) {
  const pending = op.status === "AWAITING_CONFIRMATION";
  const act = async (action) => {
    try {
      // Only the end user an operation was requested for may decide it: the operator acts as that user.
      const done = await api(`/v1/operations/${encodeURIComponent(op.id)}/${action}`, {
        method: "POST",
        body: action === "confirm" ? { confirm: true } : undefined,
        onBehalfOf: op.requested_by || undefined,
      });
      announce(action === "confirm" ? `Operation ${op.id}: ${done.verdict?.status || done.status}` : `Operation ${op.id} cancelled`);
    } catch (error) {
      announce(`Operation ${op.id}: ${error.message}`);
    }
    await reload();
  };
  return h(
    "article",
    { class: "card op", "aria-labelledby": `op-${op.id}` },
    h("h2", { id: `op-${op.id}` }, `${op.tool} `, h("code", {}, op.id)),
    h(
      "dl",
      { class: "summary" },
      h("dt", {}, "Status"), h("dd", {}, op.status, op.status_reason ? h("span", { class: "muted" }, ` — ${op.status_reason}`) : ""),
      h("dt", {}, "Verdict"), h("dd", { "data-testid": "verdict" }, verdictBadge(op)),
      h("dt", {}, "Agent"), h("dd", {}, op.agent),
      h("dt", {}, "Requested by"), h("dd", {}, op.requested_by || "–"),
      h("dt", {}, "Question"), h("dd", {}, op.confirmation_message || "–"),
      h("dt", {}, "Created"), h("dd", {}, op.created_at || "–"),
      op.confirmed_by ? [h("dt", {}, "Confirmed by"), h("dd", {}, `${op.confirmed_by} (${op.confirmed_via})`)] : null,
    ),
    items(op),
    pending
      ? h(
          "div",
          { class: "actions" },
          h("button", { type: "button", onclick: () => act("confirm"), "aria-label": `Confirm operation ${op.id}` }, "Confirm"),
          h("button", { type: "button", class: "danger", onclick: () => act("cancel"), "aria-label": `Cancel operation ${op.id}` }, "Cancel"),
        )
      : null,
  );
}

export async function showOperations(page) {
  const results = h("div", {});
  const select = h(
    "select",
    { id: "op-status", onchange: () => ((statusFilter = select.value), load()) },
    STATUSES.map((s) => h("option", { value: s, selected: s === statusFilter }, s ? s.toLowerCase().replaceAll("_", " ") : "all")),
  );
  render(
    page,
    h("h1", {}, "Operations"),
    h("div", { class: "filters" }, h("div", {}, h("label", { for: "op-status" }, "Status"), select)),
    results,
  );

  async function load() {
    const list = await api("/v1/operations", { query: { status: statusFilter, limit: 100 } });
    const pending = list.data.filter((op) => op.status === "AWAITING_CONFIRMATION");
    const others = list.data.filter((op) => op.status !== "AWAITING_CONFIRMATION");
    render(
      results,
      h("section", { "aria-labelledby": "pending-title" }, h("h2", { id: "pending-title" }, `Pending (${pending.length})`),
        pending.length ? pending.map((op) => card(op, load)) : h("p", { class: "empty" }, "Nothing waits for a confirmation.")),
      h("section", { "aria-labelledby": "finished-title" }, h("h2", { id: "finished-title" }, `Others (${others.length})`),
        others.length ? others.map((op) => card(op, load)) : h("p", { class: "empty" }, "No other operations.")),
    );
  }
  await load();
}
