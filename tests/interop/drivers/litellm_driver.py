"""Drives LiteLLM's SDK against Hatchway: the tasks on stdin, what happened on stdout (JSON).

    .ci/litellm-venv/bin/python litellm_driver.py < tasks.json     (GATEWAY_URL in the environment)

Each task is ``{"client", "scenario", "key", "model", "headers", "first", "second"}``; the answer is
one result per task, in order. Run in its own virtualenv (``.ci/litellm-venv``, made by
``.ci/run``: LiteLLM pins its own versions of libraries the gateway uses) by
``tests/interop/test_litellm_sdk.py``, once per gateway (importing LiteLLM takes seconds). Clients:
``chat`` (``litellm.completion`` with ``openai/<model>``) and ``responses`` (``litellm.responses``).
Scenarios: plain, stream, tool (a client tool round trip), turns (a second turn), confirm (first,
then second, one conversation).
"""

import json
import os
import sys

import litellm

BASE = os.environ["GATEWAY_URL"] + "/v1"
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}


def run(task):
    client, scenario = task["client"], task["scenario"]
    common = {
        "model": "openai/" + task.get("model", "gpt-4o"),
        "api_base": BASE,
        "api_key": task["key"],
        "num_retries": 0,
        "max_retries": 0,
        "extra_headers": task.get("headers") or {},
    }

    def chat(messages, **kwargs):
        return litellm.completion(messages=messages, **common, **kwargs)

    def respond(given, **kwargs):
        return litellm.responses(input=given, **common, **kwargs)

    def text_of(response):
        if client == "chat":
            return response.choices[0].message.content
        return "".join(
            part.text
            for item in response.output
            if getattr(item, "type", "") == "message"
            for part in item.content
        )

    prompt = task.get("first", "hello")
    if scenario == "plain":
        return {
            "text": text_of(
                chat([{"role": "user", "content": prompt}]) if client == "chat" else respond(prompt)
            )
        }
    if scenario == "stream":
        text = ""
        if client == "chat":
            for chunk in chat([{"role": "user", "content": prompt}], stream=True):
                text += chunk.choices[0].delta.content or ""
        else:
            for event in respond(prompt, stream=True):
                if getattr(event, "type", "") == "response.output_text.delta":
                    text += event.delta
        return {"text": text}
    if scenario in ("turns", "confirm"):
        second_prompt = task.get("second", "again")
        if client == "chat":
            first = text_of(chat([{"role": "user", "content": prompt}]))
            messages = [
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": first},
                {"role": "user", "content": second_prompt},
            ]
            second = text_of(chat(messages))
        else:
            answered = respond(prompt)
            first = text_of(answered)
            second = text_of(respond(second_prompt, previous_response_id=answered.id))
        return {"texts": [first, second]}
    if scenario == "tool":
        messages = [{"role": "user", "content": "what is the weather in Faro?"}]
        if client == "chat":
            first = chat(messages, tools=[WEATHER]).choices[0].message
            call = first.tool_calls[0]
            messages += [
                first.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
            ]
            return {"text": text_of(chat(messages, tools=[WEATHER])), "called": call.function.name}
        tools = [{"type": "function", **WEATHER["function"]}]
        first = respond(messages[0]["content"], tools=tools)
        call = next(i for i in first.output if getattr(i, "type", "") == "function_call")
        output = [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
        return {
            "text": text_of(respond(output, tools=tools, previous_response_id=first.id)),
            "called": call.name,
        }
    raise ValueError(scenario)


def outcome(task):
    try:
        return {"ok": True, **run(task)}
    except Exception as exc:  # what the client raises is the result
        status = getattr(exc, "status_code", None)
        return {
            "ok": False,
            "error": {"name": type(exc).__name__, "status": status, "message": str(exc)[:300]},
        }


print(json.dumps([outcome(task) for task in json.load(sys.stdin)]))
