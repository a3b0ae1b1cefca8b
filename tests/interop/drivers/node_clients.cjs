// Drives one Node client against Hatchway and prints what happened as one JSON line.
//
//   node node_clients.cjs <client> <scenario>      (GATEWAY_URL, API_KEY, MODEL in the environment)
//
// Clients: openai-chat, openai-responses (the `openai` package), vercel-chat (`openai.chat()`),
// vercel-responses (`openai.responses()`, store true), vercel-responses-unstored (store false),
// vercel-compatible (`@ai-sdk/openai-compatible`). Scenarios: plain, stream, tool (a client tool
// round trip), turns (a second turn), confirm (FIRST then SECOND from the environment, one
// conversation), error (whatever the call throws). Run by
// tests/interop/test_node_clients.py with NODE_PATH pointing at .ci/node/node_modules.
"use strict";

const [client, scenario] = process.argv.slice(2);
const base = `${process.env.GATEWAY_URL}/v1`;
const apiKey = process.env.API_KEY;
const model = process.env.MODEL || "gpt-4o";
const extraHeaders = JSON.parse(process.env.EXTRA_HEADERS || "{}");

function errorOf(e) {
  return {
    name: e && e.constructor ? e.constructor.name : String(e),
    status: e.status ?? e.statusCode ?? (e.lastError && e.lastError.statusCode) ?? null,
    message: String(e.message || e).slice(0, 300),
  };
}

async function openaiClient() {
  const OpenAI = require("openai");
  const sdk = new OpenAI({ baseURL: base, apiKey, maxRetries: 0, defaultHeaders: extraHeaders });
  const chat = client === "openai-chat";
  const weather = chat
    ? [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }]
    : [{ type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } }];
  const ask = async (input, opts = {}) => {
    if (chat) {
      const messages = typeof input === "string" ? [{ role: "user", content: input }] : input;
      if (opts.stream) {
        let text = "";
        for await (const chunk of await sdk.chat.completions.create({ model, messages, stream: true })) {
          text += chunk.choices[0]?.delta?.content || "";
        }
        return { text };
      }
      const done = await sdk.chat.completions.create({ model, messages, ...(opts.tools ? { tools: weather } : {}) });
      return { text: done.choices[0].message.content, message: done.choices[0].message };
    }
    if (opts.stream) {
      let text = "";
      for await (const event of await sdk.responses.create({ model, input, stream: true })) {
        if (event.type === "response.output_text.delta") text += event.delta;
      }
      return { text };
    }
    const done = await sdk.responses.create({ model, input, ...(opts.tools ? { tools: weather } : {}), ...(opts.previous ? { previous_response_id: opts.previous } : {}) });
    return { text: done.output_text, response: done };
  };
  if (scenario === "plain" || scenario === "error") return { text: (await ask("hello")).text };
  if (scenario === "stream") return { text: (await ask("hello", { stream: true })).text };
  if (scenario === "turns") {
    if (chat) {
      const first = await ask("hello");
      const second = await ask([{ role: "user", content: "hello" }, { role: "assistant", content: first.text }, { role: "user", content: "again" }]);
      return { text: `${first.text} ${second.text}` };
    }
    const first = await ask("hello");
    const second = await ask("again", { previous: first.response.id });
    return { text: `${first.text} ${second.text}` };
  }
  if (scenario === "confirm") {  // FIRST, then SECOND in the same conversation
    const [a, b] = [process.env.FIRST, process.env.SECOND];
    if (chat) {
      const first = await ask(a);
      const second = await ask([{ role: "user", content: a }, { role: "assistant", content: first.text }, { role: "user", content: b }]);
      return { texts: [first.text, second.text] };
    }
    const first = await ask(a);
    const second = await ask(b, { previous: first.response.id });
    return { texts: [first.text, second.text] };
  }
  if (scenario === "tool") {
    if (chat) {
      const messages = [{ role: "user", content: "what is the weather in Faro?" }];
      const first = await ask(messages, { tools: true });
      const call = first.message.tool_calls[0];
      messages.push(first.message, { role: "tool", tool_call_id: call.id, content: "sunny" });
      return { text: (await ask(messages, { tools: true })).text, called: call.function.name };
    }
    const first = await ask("what is the weather in Faro?", { tools: true });
    const call = first.response.output.find((i) => i.type === "function_call");
    const output = [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }];
    const second = await ask(output, { tools: true, previous: first.response.id });
    return { text: second.text, called: call.name };
  }
  throw new Error(`unknown scenario ${scenario}`);
}

async function vercelClient() {
  const { generateText, streamText, tool, stepCountIs } = require("ai");
  const { z } = require("zod");
  let languageModel;
  let providerOptions = {};
  if (client === "vercel-compatible") {
    const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");
    languageModel = createOpenAICompatible({ name: "hatchway", baseURL: base, apiKey, headers: extraHeaders })(model);
  } else {
    const { createOpenAI } = require("@ai-sdk/openai");
    const provider = createOpenAI({ baseURL: base, apiKey, headers: extraHeaders });
    languageModel = client === "vercel-chat" ? provider.chat(model) : provider.responses(model);
    if (client === "vercel-responses-unstored") providerOptions = { openai: { store: false } };
  }
  const common = { model: languageModel, maxRetries: 0, providerOptions };
  if (scenario === "plain" || scenario === "error") return { text: (await generateText({ ...common, prompt: "hello" })).text };
  if (scenario === "stream") {
    const result = streamText({ ...common, prompt: "hello", onError: () => {} });
    let text = "";
    for await (const part of result.fullStream) {
      if (part.type === "text-delta") text += part.text;
      if (part.type === "error") throw part.error;
    }
    return { text };
  }
  if (scenario === "turns") {
    const messages = [{ role: "user", content: "hello" }];
    const first = await generateText({ ...common, messages });
    messages.push(...first.response.messages, { role: "user", content: "again" });
    const second = await generateText({ ...common, messages });
    return { text: `${first.text} ${second.text}` };
  }
  if (scenario === "confirm") {
    const messages = [{ role: "user", content: process.env.FIRST }];
    const first = await generateText({ ...common, messages });
    messages.push(...first.response.messages, { role: "user", content: process.env.SECOND });
    const second = await generateText({ ...common, messages });
    return { texts: [first.text, second.text] };
  }
  if (scenario === "tool") {
    let called = null;
    const getWeather = tool({
      description: "The weather in a city.",
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        called = city;
        return "sunny";
      },
    });
    const result = await generateText({ ...common, prompt: "what is the weather in Faro?", tools: { get_weather: getWeather }, stopWhen: stepCountIs(3) });
    return { text: result.text, called };
  }
  throw new Error(`unknown scenario ${scenario}`);
}

(async () => {
  try {
    const result = client.startsWith("openai-") ? await openaiClient() : await vercelClient();
    process.stdout.write(JSON.stringify({ ok: true, ...result }) + "\n");
  } catch (e) {
    process.stdout.write(JSON.stringify({ ok: false, error: errorOf(e) }) + "\n");
  }
})();
