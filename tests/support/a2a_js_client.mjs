// The official JavaScript A2A client (@a2a-js/sdk, pinned in .ci/node-tools.json) driving a Hatchway
// agent: one JSON line per step on stdout, for tests/a2a/test_a2a_js_client.py.
// Env: A2A_AGENT_URL (the agent's base URL; its card is under /.well-known/agent-card.json),
// A2A_KEY (a Hatchway key), A2A_BINDING ("JSONRPC" or "HTTP+JSON").
import {
  ClientFactory,
  ClientFactoryOptions,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from "@a2a-js/sdk/client";

const { A2A_AGENT_URL: url, A2A_KEY: key, A2A_BINDING: binding } = process.env;
const authed = (input, init = {}) =>
  fetch(input, { ...init, headers: { ...(init.headers || {}), authorization: `Bearer ${key}` } });
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [
      new JsonRpcTransportFactory({ fetchImpl: authed }),
      new RestTransportFactory({ fetchImpl: authed }),
    ],
    preferredTransports: [binding],
  }),
);
// The card path is resolved relative to the URL: a trailing slash keeps the agent's own segment.
const client = await factory.createFromUrl(url.endsWith("/") ? url : `${url}/`);
const say = (step, value) => console.log(JSON.stringify({ step, ...value }));
let n = 0;
const message = (text, extra = {}) => ({
  message: { messageId: `js-${++n}`, role: 1, parts: [{ content: { $case: "text", value: text } }], ...extra },
});
const textOf = (artifacts) =>
  (artifacts || []).flatMap((a) => a.parts.map((p) => (p.content?.$case === "text" ? p.content.value : ""))).join("");

// 1. Send and wait for the answer.
const done = await client.sendMessage(message("first question"));
say("send", { id: done.id, contextId: done.contextId, state: done.status.state, text: textOf(done.artifacts) });

// 2. Stream, cut the connection after the first event, then resubscribe and read to the end.
const abort = new AbortController();
const stream = client.sendMessageStream(message("stream this", { contextId: done.contextId }), { signal: abort.signal });
const first = (await stream.next()).value;
const streamed = first.payload.value;
abort.abort();
await stream.return?.().catch(() => {});
let text = "";
let last = null;
for await (const event of client.resubscribeTask({ id: streamed.id })) {
  const { $case, value } = event.payload;
  if ($case === "artifactUpdate") text += textOf([value.artifact]);
  if ($case === "statusUpdate") last = value.status.state;
}
say("resubscribe", { id: streamed.id, firstCase: first.payload.$case, state: last, text });

// 3. Get and list.
const got = await client.getTask({ id: done.id });
say("get", { id: got.id, state: got.status.state, text: textOf(got.artifacts) });
const listed = await client.listTasks({ contextId: done.contextId });
say("list", { ids: listed.tasks.map((t) => t.id), total: listed.totalSize });

// 4. A task returned at once, then cancelled.
const slow = await client.sendMessage({ ...message("take long"), configuration: { returnImmediately: true } });
const cancelled = await client.cancelTask({ id: slow.id });
say("cancel", { id: slow.id, before: slow.status.state, state: cancelled.status.state });
