// Responses: stored responses, each expandable into the subagent children it spawned (a tree).

import { api } from "../api.js";
import { badge, h, render, time } from "../dom.js";

function statusBadge(status) {
  const kind = status === "completed" ? "ok" : status === "failed" || status === "cancelled" ? "bad" : "warn";
  return badge(status, kind);
}

function node(response) {
  const children = h("ul", { role: "group", hidden: true });
  let loaded = false;
  const toggle =
    response.children_count > 0
      ? h(
          "button",
          {
            type: "button",
            class: "secondary",
            "aria-expanded": "false",
            onclick: async () => {
              const open = toggle.getAttribute("aria-expanded") === "true";
              if (!open && !loaded) {
                const list = await api("/v1/responses", { query: { parent_response_id: response.id } });
                render(children, list.data.map(node));
                loaded = true;
              }
              toggle.setAttribute("aria-expanded", String(!open));
              toggle.textContent = open ? `Show ${response.children_count} subagent responses` : "Hide subagent responses";
              children.hidden = open;
            },
          },
          `Show ${response.children_count} subagent responses`,
        )
      : null;
  const text = response.output_text || response.error?.message || "";
  return h(
    "li",
    { role: "treeitem", "aria-label": `${response.id} ${response.status}` },
    h(
      "div",
      { class: "node" },
      h("div", { class: "line" }, h("code", {}, response.id), statusBadge(response.status), h("span", {}, response.model),
        h("span", { class: "muted" }, time(response.created_at)), response.on_behalf_of ? h("span", { class: "muted" }, `for ${response.on_behalf_of}`) : null),
      text ? h("p", {}, text.length > 300 ? `${text.slice(0, 300)}…` : text) : null,
      toggle,
    ),
    children,
  );
}

export async function showResponses(page) {
  const list = await api("/v1/responses", { query: { limit: 50 } });
  render(
    page,
    h("h1", {}, "Responses"),
    h("p", { class: "muted" }, "Stored responses, newest first. A response that delegated work shows its subagent responses beneath it."),
    list.data.length
      ? h("ul", { class: "tree", role: "tree", "aria-label": "Responses and their subagents" }, list.data.map(node))
      : h("p", { class: "empty" }, "No stored responses yet."),
  );
}
