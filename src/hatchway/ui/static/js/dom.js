// Building DOM nodes. Text always goes in as text nodes, never as HTML, so values from the API
// (tool results, error messages, names) cannot inject markup.

/** h("tag", {attr: value, onclick: fn}, ...children) → an element. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "style" && typeof value === "object") Object.assign(el.style, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace everything inside ``el``. */
export function render(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** A table with a caption, header cells and one row per item (``row(item)`` → cells). */
export function table(caption, headers, items, row, emptyText = "Nothing here yet.") {
  if (!items.length) return h("p", { class: "empty" }, emptyText);
  return h(
    "table",
    {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, items.map((item) => h("tr", {}, row(item).map((cell) => (cell instanceof Node && cell.tagName === "TD" ? cell : h("td", {}, cell)))))),
  );
}

export function badge(text, kind) {
  return h("span", { class: `badge ${kind}` }, text);
}

export function time(seconds) {
  if (!seconds) return "–";
  return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19) + "Z";
}

export function ms(value) {
  if (value === undefined || value === null) return "–";
  return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${Math.round(value)} ms`;
}

/** A cost in USD: cents for a dollar amount, three significant digits below a cent; null is unknown. */
export function usd(value) {
  if (value === null || value === undefined) return "unknown";
  if (!value) return "$0";
  return value >= 0.01 ? `$${value.toFixed(2)}` : `$${value.toPrecision(3)}`;
}

/** Show a short message in the page's live region (read out by screen readers). */
export function announce(text) {
  const status = document.getElementById("status");
  status.textContent = text;
  clearTimeout(announce.timer);
  announce.timer = setTimeout(() => (status.textContent = ""), 4000);
}
