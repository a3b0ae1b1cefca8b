// Tool pins: the MCP tools whose definition is not the approved one, each with its diff; approve one
// server's (what `hatchway tools approve` does). Text goes in as text nodes: a server's description
// is shown, never rendered.

import { api } from "../api.js";
import { announce, badge, h, render } from "../dom.js";

function lineKind(line) {
  if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("@@")) return "muted";
  return line.startsWith("+") ? "added" : line.startsWith("-") ? "removed" : "";
}

function diffView(text) {
  return h(
    "pre",
    { class: "diff" },
    text.split("\n").map((line) => h("span", { class: lineKind(line) }, line + "\n")),
  );
}

export async function showPins(page) {
  const list = h("div", {});
  const error = h("p", { class: "error", role: "alert" });

  async function approve(pin) {
    if (!window.confirm(`Approve what ${pin.server} now says of ${pin.tool}? The model will see it again.`)) return;
    error.textContent = "";
    try {
      await api(`/v1/tools/drift/${encodeURIComponent(pin.server)}/approve`, { method: "POST", body: { tools: [pin.tool] } });
    } catch (e) {
      error.textContent = e.message;
      return;
    }
    announce(`${pin.server}/${pin.tool} approved`);
    await load();
  }

  async function load() {
    const found = await api("/v1/tools/drift");
    if (!found.data.length) {
      render(list, h("p", { class: "empty" }, "Every tool is as it was approved."));
      return;
    }
    render(
      list,
      found.data.map((pin) =>
        h(
          "section",
          { class: "pin", "aria-label": `${pin.server}/${pin.tool}` },
          h("h2", {}, h("code", {}, `${pin.server}/${pin.tool}`), " ", badge(pin.change === "new" ? "added" : "changed", "warn")),
          h("p", { class: "muted" }, `seen ${pin.seen_at}`),
          diffView(pin.diff),
          h("button", { type: "button", onclick: () => approve(pin), "aria-label": `Approve ${pin.server}/${pin.tool}` }, "Approve"),
        ),
      ),
    );
  }

  render(
    page,
    h("h1", {}, "Tool pins"),
    h("p", { class: "muted" }, "MCP tools whose definition changed since it was approved, or that a server added since: withheld from the model (tool_drift: block) or kept with a warning, until approved."),
    error,
    list,
  );
  await load();
}
