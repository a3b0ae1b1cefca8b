"""Canonical items ⇄ Chat Completions messages, used by the OpenAI-compatible provider and the Chat API."""

from __future__ import annotations

from typing import Any

import orjson

from hatchway.engine.items import FunctionCall, FunctionCallOutput, Item, Message
from hatchway.errors import InvalidRequest

_TO_CHAT_PART = {"input_text": "text", "output_text": "text"}


def _part_to_chat(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind in _TO_CHAT_PART:
        return {"type": "text", "text": part.get("text", "")}
    if kind == "input_image":
        url = part.get("image_url") or part.get("file_id")
        image: dict[str, Any] = {"url": url}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":  # Chat Completions' file part takes the same fields
        return {"type": "file", "file": {k: v for k, v in part.items() if k != "type"}}
    return part


def _part_from_chat(part: Any, path: str) -> dict[str, Any]:
    if not isinstance(part, dict) or "type" not in part:
        raise InvalidRequest(f"{path}: each content part must be an object with a 'type'", param=path)
    kind = part["type"]
    if kind == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    if kind == "image_url":
        image = part.get("image_url") or {}
        url = image.get("url") if isinstance(image, dict) else image
        out: dict[str, Any] = {"type": "input_image", "image_url": url}
        if isinstance(image, dict) and image.get("detail"):
            out["detail"] = image["detail"]
        return out
    return dict(part)


def _content_to_chat(content: str | list[dict[str, Any]], role: str) -> Any:
    if isinstance(content, str):
        return content
    parts = [_part_to_chat(p) for p in content]
    if role == "assistant" or all(p.get("type") == "text" for p in parts):
        # Many upstreams accept only a string for assistant (and system) content.
        if all(p.get("type") == "text" for p in parts):
            return "".join(p["text"] for p in parts)
    return parts


def items_to_messages(items: list[Item]) -> list[dict[str, Any]]:
    """Canonical items → chat messages; an assistant's text and its calls become one message."""
    messages: list[dict[str, Any]] = []
    shown: list[dict[str, Any]] = []
    """Images of tool results, as user messages once the run of tool messages ends."""
    for item in items:
        if shown and not isinstance(item, FunctionCallOutput):
            messages.extend(shown)  # after the run of tool messages, which must follow their calls
            shown.clear()
        if isinstance(item, Message):
            messages.append({"role": item.role, "content": _content_to_chat(item.content, item.role)})
        elif isinstance(item, FunctionCall):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant" and not last.get("_closed"):
                last["tool_calls"] = [call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutput):
            if messages and messages[-1]["role"] == "assistant":
                messages[-1]["_closed"] = True
            text, images = _tool_content(item)
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": text})
            if images:
                shown.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": f"The result of tool call {item.call_id}:"},
                            *images,
                        ],
                    }
                )
    messages.extend(shown)
    for message in messages:
        message.pop("_closed", None)
    return messages


def _tool_content(item: FunctionCallOutput) -> tuple[str, list[dict[str, Any]]]:
    """A tool result as a chat ``tool`` message can carry it: text only. Its images follow in a
    user message (the only role that takes them); other blocks (a document, ``tool_reference``) are
    told as JSON; ``is_error`` as an ``[error]`` prefix. ``cache_control`` has no chat form."""
    if not item.parts:
        text, images = item.output, []
    else:
        texts, images = [], []
        for part in item.parts:
            kind = part.get("type")
            if kind in ("input_text", "output_text", "text"):
                texts.append(str(part.get("text", "")))
            elif kind == "input_image":
                images.append(_part_to_chat(part))
            else:
                texts.append(orjson.dumps({k: v for k, v in part.items() if k != "cache_control"}).decode())
        text = "".join(texts)
        if images:
            text += f"{chr(10) if text else ''}[{len(images)} image(s): in the next message]"
    return (f"[error] {text}" if item.is_error else text), images


def messages_to_items(messages: Any) -> list[Item]:
    """Chat messages → canonical items, with field paths in every error."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: must be a non-empty array", param="messages")
    items: list[Item] = []
    for i, msg in enumerate(messages):
        path = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise InvalidRequest(f"{path}: must be an object", param=path)
        role = msg.get("role")
        if role in ("system", "developer", "user"):
            items.append(Message(role=role, content=_content_from_chat(msg.get("content"), path)))
        elif role == "assistant":
            items.extend(_assistant_items(msg, path))
        elif role == "tool":
            call_id = msg.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidRequest(
                    f"{path}.tool_call_id: required for a tool message", param=f"{path}.tool_call_id"
                )
            content = msg.get("content")
            text = content if isinstance(content, str) else _joined_text(content)
            items.append(FunctionCallOutput(call_id=call_id, output=text))
        else:
            raise InvalidRequest(
                f"{path}.role: must be one of system, developer, user, assistant, tool (got {role!r})",
                param=f"{path}.role",
            )
    return items


def _joined_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _content_from_chat(content: Any, path: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return [_part_from_chat(p, f"{path}.content[{j}]") for j, p in enumerate(content)]
    raise InvalidRequest(f"{path}.content: must be a string or an array of parts", param=f"{path}.content")


def _assistant_items(msg: dict[str, Any], path: str) -> list[Item]:
    items: list[Item] = []
    content = msg.get("content")
    if content:
        items.append(Message(role="assistant", content=_content_from_chat(content, path)))
    calls = msg.get("tool_calls") or []
    if not isinstance(calls, list):
        raise InvalidRequest(f"{path}.tool_calls: must be an array", param=f"{path}.tool_calls")
    for j, call in enumerate(calls):
        cpath = f"{path}.tool_calls[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(fn, dict)
            or not isinstance(fn.get("name"), str)
            or not isinstance(call.get("id"), str)
        ):
            raise InvalidRequest(f"{cpath}: needs 'id' and 'function.name'", param=cpath)
        args = fn.get("arguments", "")
        items.append(
            FunctionCall(call_id=call["id"], name=fn["name"], arguments=args if isinstance(args, str) else "")
        )
    if not items:
        items.append(Message(role="assistant", content=""))
    return items
