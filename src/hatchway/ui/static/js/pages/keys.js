// Settings › Keys: the organisation's API keys — name, role, prefix, dates; never a key's value.
// Admins only (the admin API refuses others, and the page says which role is needed).

import { api } from "../api.js";
import { h, render, table } from "../dom.js";

const day = (iso) => (iso ? iso.replace("T", " ").slice(0, 19) : "–");

export async function showKeys(page) {
  const me = await api("/v1/admin/me");
  const keys = await api(`/v1/admin/orgs/${encodeURIComponent(me.organization.id)}/keys`);
  render(
    page,
    h("h1", {}, `Keys of ${me.organization.name}`),
    table(
      "API keys of this organisation (values are never shown)",
      ["Name", "Role", "Prefix", "Created", "Expires"],
      keys.data,
      (k) => [k.name, k.role, h("code", {}, `${k.prefix}…`), day(k.created_at), day(k.expires_at)],
      "No keys yet.",
    ),
  );
}
