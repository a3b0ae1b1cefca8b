// Settings › Audit: the organisation's audit trail, newest page last, as the admin API returns it in
// chain order (who, what, on what, from where, with which outcome). Admins only.

import { api } from "../api.js";
import { badge, h, render, table } from "../dom.js";

const when = (iso) => iso.replace("T", " ").slice(0, 19);
const PAGE = 100;

export async function showAudit(page, after = null) {
  const me = await api("/v1/admin/me");
  const org = encodeURIComponent(me.organization.id);
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (after !== null) query.set("after", String(after));
  const trail = await api(`/v1/admin/orgs/${org}/audit?${query}`);
  const more = trail.has_more
    ? h("button", { type: "button", onclick: () => showAudit(page, trail.last_seq) }, "Next entries")
    : null;
  render(
    page,
    h("h1", {}, `Audit trail of ${me.organization.name}`),
    h(
      "p",
      {},
      "Every change and every refusal by role, chained by hash: `hatchway audit verify` checks it offline.",
    ),
    table(
      "Audit trail entries, oldest first",
      ["#", "When", "Actor", "Action", "Target", "Outcome", "Source"],
      trail.data,
      (e) => [
        String(e.seq),
        when(e.at),
        h("code", {}, e.actor),
        e.action,
        h("code", {}, e.target),
        badge(e.outcome, e.outcome === "success" ? "ok" : "bad"),
        e.source || "–",
      ],
      "No entries yet.",
    ),
    more,
  );
}
