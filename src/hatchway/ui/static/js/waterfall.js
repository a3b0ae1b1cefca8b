// A run's steps as a waterfall: one row per model call and tool call, bars placed by start time.

import { h, ms, usd } from "./dom.js";

function label(step) {
  if (step.type === "model_call") return `Model call · round ${step.round}`;
  if (step.type === "list_tools") return `List tools · ${step.server}`;
  if (step.type === "guard_classifier") return `Guard classifier · ${step.model} on ${step.source}`;
  if (step.type === "sampling") return `Sampling for a server · ${step.model}`;
  if (step.type === "side_calls_omitted") return `${step.count} more model calls (classifier, sampling) not listed`;
  const where = step.server ? `${step.server} › ${step.tool}` : step.tool || step.name;
  return `Tool ${where} · round ${step.round}`;
}

/** Start offsets (ms from the run's first step); older records without times are laid end to end. */
function offsets(steps) {
  const starts = steps.map((s) => s.started_at_ms).filter((v) => typeof v === "number");
  if (starts.length === steps.length && steps.length) {
    const first = Math.min(...starts);
    return steps.map((s) => s.started_at_ms - first);
  }
  let cursor = 0;
  return steps.map((s) => {
    const at = cursor;
    cursor += s.duration_ms || 0;
    return at;
  });
}

function details(step) {
  if (step.type === "model_call") {
    const calls = step.tool_calls?.length ? `; asked for ${step.tool_calls.join(", ")}` : "";
    const cost = "cost_usd" in step ? `; ${usd(step.cost_usd)}${step.upstream_model ? ` on ${step.upstream_model}` : ""}` : "";
    return `${step.prompt_tokens ?? 0} tokens in, ${step.completion_tokens ?? 0} out${cost}; finish ${step.finish_reason ?? step.outcome}${calls}`;
  }
  if (step.type === "list_tools") return `tools not listed: ${step.error}`;
  if (step.type === "side_calls_omitted") return "their tokens and cost are in the run's totals";
  if (step.type === "guard_classifier" || step.type === "sampling") {
    const used =
      "prompt_tokens" in step
        ? `${step.prompt_tokens} tokens in, ${step.completion_tokens} out; ${usd(step.cost_usd)}`
        : "no answer";
    return step.outcome ? `${step.outcome}; ${used}` : used;
  }
  const flags = [step.outcome, step.cached ? "cached" : null, step.retries ? `${step.retries} retries` : null];
  return flags.filter(Boolean).join(" · ");
}

export function waterfall(steps, labelledBy) {
  if (!steps.length) return h("p", { class: "empty" }, "This request recorded no steps.");
  const at = offsets(steps);
  const total = Math.max(1, ...steps.map((s, i) => at[i] + (s.duration_ms || 0)));
  const legend = h(
    "div",
    { class: "legend", "aria-hidden": "true" },
    h("span", {}, h("span", { class: "swatch", style: { background: "var(--model)" } }), "model call"),
    h("span", {}, h("span", { class: "swatch", style: { background: "var(--tool)" } }), "tool call"),
    h("span", {}, `total ${ms(total)}`),
  );
  const rows = steps.map((step, i) => {
    const failed = step.outcome && !["ok", "safe"].includes(step.outcome);
    const bar = h("div", {
      class: `bar ${step.type}${failed ? " failed" : ""}`,
      style: { left: `${(at[i] / total) * 100}%`, width: `${((step.duration_ms || 0) / total) * 100}%` },
      title: `${label(step)}: ${ms(step.duration_ms)}`,
    });
    const more = [];
    if (step.type === "tool_call") {
      more.push(h("div", {}, "Arguments"), h("pre", {}, step.arguments || ""));
      more.push(h("div", {}, "Result preview"), h("pre", {}, step.result_preview || ""));
      if (step.operation_id) more.push(h("div", {}, "Operation ", h("code", {}, step.operation_id)));
      if (step.child_response_id) more.push(h("div", {}, "Subagent response ", h("code", {}, step.child_response_id)));
    }
    return h(
      "li",
      { "aria-label": `${label(step)}, ${ms(step.duration_ms)}, ${details(step)}` },
      h("div", { class: "label" }, h("strong", {}, label(step)), h("div", { class: "muted" }, `${ms(step.duration_ms)} · ${details(step)}`)),
      h("div", { class: "track", "aria-hidden": "true" }, bar),
      more.length ? h("details", {}, h("summary", {}, "Details"), more) : null,
    );
  });
  return h("div", {}, legend, h("ol", { class: "waterfall", "aria-labelledby": labelledBy }, rows));
}
