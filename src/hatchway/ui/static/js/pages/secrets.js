// Settings › Secrets: names and allowed hosts; add and delete. A value is sent once and never shown.

import { api } from "../api.js";
import { announce, h, render, table, time } from "../dom.js";

export async function showSecrets(page) {
  const list = h("div", {});
  const error = h("p", { class: "error", role: "alert" });
  const name = h("input", { id: "secret-name", required: true, pattern: "[A-Za-z0-9_-]{1,64}", autocomplete: "off" });
  const value = h("input", { id: "secret-value", type: "password", required: true, autocomplete: "new-password" });
  const hosts = h("input", { id: "secret-hosts", placeholder: "api.example.com, idp.example.com" });
  const field = (id, text, input) => h("div", {}, h("label", { for: id }, text), input);

  async function add(event) {
    event.preventDefault();
    error.textContent = "";
    const allowed = hosts.value.split(",").map((s) => s.trim()).filter(Boolean);
    try {
      await api(`/v1/secrets/${encodeURIComponent(name.value.trim())}`, {
        method: "PUT",
        body: { value: value.value, ...(allowed.length ? { allowed_hosts: allowed } : {}) },
      });
    } catch (e) {
      error.textContent = e.message;
      return;
    } finally {
      value.value = ""; // the value leaves the page as soon as it is sent
    }
    announce(`Secret ${name.value.trim()} saved`);
    name.value = "";
    hosts.value = "";
    await load();
  }

  async function remove(secretName) {
    if (!window.confirm(`Delete the secret ${secretName}? Plugins that use it will fail.`)) return;
    await api(`/v1/secrets/${encodeURIComponent(secretName)}`, { method: "DELETE" });
    announce(`Secret ${secretName} deleted`);
    await load();
  }

  async function load() {
    const secrets = await api("/v1/secrets");
    render(
      list,
      table("Secrets of this organisation (values are never shown)", ["Name", "Allowed hosts", "Updated", ""], secrets.data, (s) => [
        h("code", {}, s.name),
        s.allowed_hosts?.length ? s.allowed_hosts.join(", ") : "–",
        typeof s.updated_at === "number" ? time(s.updated_at) : s.updated_at || "–",
        h("button", { type: "button", class: "danger", onclick: () => remove(s.name), "aria-label": `Delete secret ${s.name}` }, "Delete"),
      ], "No secrets yet."),
    );
  }

  render(
    page,
    h("h1", {}, "Secrets"),
    h(
      "form",
      { class: "inline card", "aria-label": "Add a secret", onsubmit: add },
      field("secret-name", "Name", name),
      field("secret-value", "Value", value),
      field("secret-hosts", "Allowed hosts (optional, comma-separated)", hosts),
      h("button", { type: "submit" }, "Add secret"),
    ),
    error,
    list,
  );
  await load();
}
