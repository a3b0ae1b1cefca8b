// Approvals: the inbox of operations that wait for someone other than their requester (a supervisor,
// two distinct approvers, the security group of a tainted run), and one of them in full — the
// question, the arguments, the validator's items, the requester, the run that led there, the
// decisions so far — with Approve / Reject and a comment for those who may decide it.
//
// #/approvals/<operation id> is the link the approval notifications carry ({inbox_url}/ui/#/approvals/<id>).
// A decision needs a verified person: signed in with SSO (the session's CSRF token goes with it, api.js).

import { api, session } from "../api.js";
import { announce, badge, h, render, table } from "../dom.js";

const PAGE = 50;
const when = (iso) => (iso ? `${iso.replace("T", " ").slice(0, 19)}Z` : "–");
const link = (id) => `#/approvals/${encodeURIComponent(id)}`;

/** "in 3 h", "in 12 min", "expired" — how long a decision may still be made. */
function untilExpiry(iso) {
  if (!iso) return "";
  const seconds = (Date.parse(iso) - Date.now()) / 1000;
  if (Number.isNaN(seconds)) return "";
  if (seconds <= 0) return "expired";
  if (seconds < 3600) return `in ${Math.max(1, Math.round(seconds / 60))} min`;
  if (seconds < 2 * 86400) return `in ${Math.round(seconds / 3600)} h`;
  return `in ${Math.round(seconds / 86400)} days`;
}

function expires(view) {
  const left = untilExpiry(view.expires_at);
  return [when(view.expires_at), left ? h("span", { class: "muted" }, ` (${left})`) : null];
}

/** A value of the arguments or an item: strings as they are, anything else as JSON. */
function plain(value) {
  if (typeof value === "string") return value;
  return JSON.stringify(value);
}

function valueCell(value) {
  if (value !== null && typeof value === "object") return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
  if (typeof value === "string") return value;
  return h("code", {}, JSON.stringify(value));
}

/** The arguments in one line for the list: "order_id: R-1, amount: 900". */
function argumentsLine(args) {
  if (args === null || typeof args !== "object") return args === undefined || args === null ? "–" : plain(args);
  const text = Object.entries(args)
    .map(([name, value]) => `${name}: ${plain(value)}`)
    .join(", ");
  return text.length > 120 ? `${text.slice(0, 119)}…` : text || "–";
}

function statusBadge(status) {
  const kind = status === "COMPLETED" ? "ok" : ["CANCELLED", "FAILED", "OUT_OF_SCOPE", "INTERRUPTED"].includes(status) ? "bad" : "warn";
  return badge(status, kind);
}

function verdictBadge(verdict) {
  if (!verdict) return "–";
  return badge(verdict, verdict === "SUCCESS" ? "ok" : verdict === "FAILED" ? "bad" : "warn");
}

/** The warning a tainted run carries: untrusted tool output came before this call. */
function taintBadge(run) {
  if (!run?.tainted) return null;
  const tools = (run.tainted_by || []).join(", ") || "a tool";
  return badge(`untrusted tool output preceded this (${tools})`, "bad taint");
}

function approversText(approval) {
  const count = approval.required > 1 ? `${approval.required} distinct of ` : "";
  return `${count}${approval.approvers_label}`;
}

function progress(approval) {
  return `${approval.approvals_counted} / ${approval.required}`;
}

function youCell(view) {
  if (view.can_decide) return badge("you may decide", "ok");
  return h("span", { class: "muted" }, view.why_not || "–");
}

function inboxRow(view) {
  return [
    h("a", { href: link(view.id), "aria-label": `Open approval of ${view.tool} ${view.id}` }, view.tool),
    view.requested_by || "–",
    h("span", { class: "mono" }, argumentsLine(view.arguments)),
    [view.approval.rule || "–", view.approval.escalated ? [" ", badge("escalated", "warn")] : null],
    approversText(view.approval),
    h("td", { class: "num" }, progress(view.approval)),
    expires(view),
    taintBadge(view.run) || h("span", { class: "muted" }, "–"),
    youCell(view),
  ];
}

const INBOX_HEADERS = ["Tool", "Requested by", "Arguments", "Rule", "Approvers", "Approvals", "Expires", "Run", "You"];

export async function showApprovals(page) {
  const results = h("div", { id: "approvals-results" });
  render(
    page,
    h("h1", {}, "Approvals"),
    h(
      "p",
      { class: "muted" },
      "Operations waiting for an approver other than their requester (tool_policies.yaml approvals, or a run " +
        "that read untrusted tool output). Open one to see what it does and to approve or reject it.",
    ),
    session.key()
      ? h("p", { class: "muted", role: "note" }, "Signed in with an API key: approvals are decided by a person signed in with SSO.")
      : null,
    results,
  );

  async function load(after) {
    const list = await api("/v1/approvals", { query: { after, limit: PAGE } });
    const rows = after ? [...load.rows, ...list.data] : list.data;
    load.rows = rows;
    const more = list.has_more
      ? h("button", { type: "button", class: "secondary", onclick: () => load(list.last_id) }, "Load more")
      : null;
    render(
      results,
      table("Operations awaiting approval, newest first", INBOX_HEADERS, rows, inboxRow, "Nothing awaits an approval."),
      more,
    );
  }
  await load();
}

function summary(view) {
  const item = (term, ...value) => [h("dt", {}, term), h("dd", {}, ...value)];
  const approval = view.approval;
  return h(
    "dl",
    { class: "summary" },
    item("Status", statusBadge(view.status), view.status_reason ? h("span", { class: "muted" }, ` — ${view.status_reason}`) : null),
    [h("dt", {}, "Question"), h("dd", { class: "question" }, view.question || "–")],
    item("Tool", h("code", {}, view.tool)),
    item("Agent", view.agent),
    item("Requested by", view.requested_by || "–"),
    item("Created", when(view.created_at)),
    item("Expires", expires(view)),
    item(
      "Rule",
      approval.rule || "–",
      approval.source ? h("span", { class: "muted" }, ` (${approval.source})`) : null,
      approval.condition ? [" when ", h("code", {}, approval.condition)] : null,
    ),
    item("Approvers", approversText(approval), approval.escalated ? [" ", badge("escalated", "warn")] : null),
    item("Approvals", h("span", { "data-testid": "approvals-counted" }, progress(approval)), " counted"),
    item("On timeout", approval.on_timeout || "–"),
  );
}

function argumentsSection(view) {
  const args = view.arguments;
  const rows = args !== null && typeof args === "object" && !Array.isArray(args) ? Object.entries(args) : [];
  return h(
    "section",
    { class: "card", "aria-labelledby": "arguments-title" },
    h("h2", { id: "arguments-title" }, "Arguments"),
    rows.length
      ? table("The arguments it runs with (as resolved)", ["Argument", "Value"], rows, ([name, value]) => [h("code", {}, name), valueCell(value)])
      : h("pre", { class: "json" }, JSON.stringify(args, null, 2)),
    h("p", { class: "muted" }, "Arguments digest ", h("code", {}, view.arguments_digest || "–"), ": an approval counts for these arguments only."),
    h("details", {}, h("summary", {}, "As JSON"), h("pre", { class: "json" }, JSON.stringify(args, null, 2))),
  );
}

/** Rows of objects (validator items, results) as a table of the keys they have. */
function objectsTable(caption, rows, emptyText) {
  const keys = [];
  for (const row of rows) {
    for (const key of Object.keys(row && typeof row === "object" ? row : { value: row })) if (!keys.includes(key)) keys.push(key);
  }
  return table(caption, keys, rows, (row) => keys.map((key) => {
    const value = row && typeof row === "object" ? row[key] : key === "value" ? row : undefined;
    if (value === undefined) return "";
    if (typeof value === "boolean") return badge(String(value), value ? "ok" : "bad");
    return valueCell(value);
  }), emptyText);
}

function itemsSection(view) {
  return h(
    "section",
    { class: "card", "aria-labelledby": "items-title" },
    h("h2", { id: "items-title" }, "Items"),
    objectsTable("What the validator resolved, item by item", view.items || [], "No validator items (the tool has no pre-validation)."),
  );
}

function runSection(view) {
  const run = view.run || {};
  const item = (term, ...value) => [h("dt", {}, term), h("dd", {}, ...value)];
  const code = (value) => (value ? h("code", {}, value) : "–");
  return h(
    "section",
    { class: "card", "aria-labelledby": "run-title" },
    h("h2", { id: "run-title" }, "The run that led here"),
    run.tainted
      ? h(
          "p",
          { class: "callout", role: "note", "data-testid": "tainted" },
          taintBadge(run),
          " The model read the output of ",
          (run.tainted_by || []).map((tool, i) => [i ? ", " : "", h("code", {}, tool)]),
          " before it made this call: that text may be steering it. Check the arguments against what the requester asked for.",
        )
      : null,
    h(
      "dl",
      { class: "summary" },
      item("Response", code(run.response_id)),
      item("Session", code(run.session_key)),
      item("Tool call", code(run.call_id)),
      item("Untrusted output before it", run.tainted ? (run.tainted_by || []).join(", ") || "yes" : "none"),
    ),
  );
}

function decisionsSection(view) {
  return h(
    "section",
    { class: "card", "aria-labelledby": "decisions-title" },
    h("h2", { id: "decisions-title" }, "Decisions"),
    table(
      "Decisions so far, oldest first",
      ["Approver", "Decision", "Comment", "Via", "Stage", "Counts", "When"],
      view.decisions || [],
      (d) => [
        d.approver,
        badge(d.decision, d.decision === "approve" ? "ok" : "bad"),
        d.comment || "–",
        d.via,
        String(d.stage),
        d.counts ? "yes" : h("span", { class: "muted" }, "no (other arguments or stage)"),
        when(d.decided_at),
      ],
      "No decisions yet.",
    ),
  );
}

function outcomeSection(view) {
  const outcome = view.outcome;
  if (!outcome) return null;
  const item = (term, ...value) => [h("dt", {}, term), h("dd", {}, ...value)];
  return h(
    "section",
    { class: "card", "aria-labelledby": "outcome-title", "data-testid": "approval-outcome" },
    h("h2", { id: "outcome-title" }, "Outcome"),
    h(
      "dl",
      { class: "summary" },
      item("Status", h("span", { "data-testid": "outcome-status" }, statusBadge(outcome.status))),
      item("Verdict", h("span", { "data-testid": "outcome-verdict" }, verdictBadge(outcome.verdict))),
      item("Approved by", outcome.approved_by || "–"),
      view.status_reason ? item("Reason", view.status_reason) : null,
    ),
    outcome.results?.length ? objectsTable("Per item", outcome.results, "") : null,
  );
}

function decideSection(view, page) {
  if (view.status !== "AWAITING_APPROVAL") return null;
  if (!view.can_decide) {
    return h(
      "section",
      { class: "card", "aria-labelledby": "decide-title" },
      h("h2", { id: "decide-title" }, "Decide"),
      h("p", { class: "warn", role: "note", "data-testid": "why-not" }, `You cannot decide this: ${view.why_not || "not allowed"}.`),
    );
  }
  const stillShown = () => window.location.hash === link(view.id); // not navigated away meanwhile
  const me = session.person()?.subject;
  const mine = (view.decisions || []).find((d) => d.approver === me && d.counts);
  const comment = h("textarea", { id: "approval-comment", rows: 3, maxlength: 2000 });
  const error = h("p", { class: "error", role: "alert" });
  const buttons = [];
  const decide = async (action) => {
    buttons.forEach((b) => (b.disabled = true));
    error.textContent = "";
    const body = { arguments_digest: view.arguments_digest };
    const text = comment.value.trim();
    if (text) body.comment = text;
    let after;
    try {
      after = await api(`/v1/approvals/${encodeURIComponent(view.id)}/${action}`, { method: "POST", body });
    } catch (exc) {
      buttons.forEach((b) => (b.disabled = false));
      if (!stillShown()) return announce(`Operation ${view.id}: ${exc.message}`);
      if (exc.status !== 409) {
        error.textContent = `Not ${action === "approve" ? "approved" : "rejected"}: ${exc.message}`;
        return;
      }
      // Decided meanwhile, or its arguments changed: show it as it stands now, and why.
      after = await api(`/v1/approvals/${encodeURIComponent(view.id)}`);
      renderApproval(page, after, `Not ${action === "approve" ? "approved" : "rejected"}: ${exc.message}`);
      return;
    }
    announce(`Operation ${after.id}: ${after.status}`);
    if (stillShown()) renderApproval(page, after);
  };
  const approve = h("button", { type: "button", onclick: () => decide("approve") }, "Approve");
  const reject = h("button", { type: "button", class: "danger", onclick: () => decide("reject") }, "Reject");
  buttons.push(approve, reject);
  return h(
    "section",
    { class: "card", "aria-labelledby": "decide-title" },
    h("h2", { id: "decide-title" }, "Decide"),
    mine
      ? h("p", { class: "muted", role: "note" }, `You approved it; ${view.approval.required - view.approval.approvals_counted} more approval(s) needed.`)
      : null,
    h("label", { for: "approval-comment" }, "Comment"),
    comment,
    h("div", { class: "actions" }, approve, reject),
    h("p", { class: "muted" }, "Approve runs it with exactly these arguments once the policy's approvals are in; Reject cancels it."),
    error,
  );
}

function renderApproval(page, view, notice = null) {
  render(
    page,
    h("p", {}, h("a", { href: "#/approvals" }, "← All approvals")),
    h("h1", {}, `Approval of ${view.tool} `, h("code", {}, view.id)),
    notice ? h("p", { class: "error", role: "alert" }, notice) : null,
    taintBadge(view.run) ? h("p", {}, taintBadge(view.run)) : null,
    h("div", { class: "approval" },
      h("section", { class: "card", "aria-label": "Approval summary" }, summary(view)),
      outcomeSection(view),
      argumentsSection(view),
      itemsSection(view),
      runSection(view),
      decisionsSection(view),
      decideSection(view, page),
    ),
  );
}

export async function showApproval(page, id) {
  renderApproval(page, await api(`/v1/approvals/${encodeURIComponent(id)}`));
}
