"""The protocol of the stand-in vLLM server's Responses API (/v1/responses), as vLLM serves it to
a model without a reasoning or tool parser: request validation, the response body and the
stream's events. Pure functions; no I/O. docs/sim-server.md ("Endpoints") documents what is
simulated.

Shapes follow vLLM's source (behaviour, not code): vllm/entrypoints/openai/responses/
protocol.py (ResponsesRequest, ResponsesResponse, ResponseUsage), responses/serving.py
(create_responses, responses_full_generator, _make_response_output_items,
_process_simple_streaming_events, responses_stream_generator), responses/utils.py
(construct_input_messages, construct_tool_dicts) and responses/api_router.py (SSE framing).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inferledger.sim_errors import (
    ApiError,
    FieldError,
    flag,
    lax_float,
    lax_int,
    missing,
    object_body,
    text_content,
    validation_error,
    validator_error,
)
from inferledger.sim_openai import event

#: ResponsesRequest's defaults vLLM echoes in the response when the request leaves them out.
_DEFAULT_TEMPERATURE = 1.0
_DEFAULT_TOP_P = 1.0


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    """A validated /v1/responses body: the messages and tools the chat template renders, and
    what the response echoes."""

    request_id: str
    messages: tuple[dict[str, Any], ...]
    tool_dicts: list[dict[str, Any]] | None  # what the chat template gets as `tools`
    stream: bool
    max_output_tokens: int | None
    echo: dict[str, Any]  # request fields the response repeats
    include_logprobs: bool
    store: bool


_ECHOED = (
    "instructions",
    "metadata",
    "max_tool_calls",
    "previous_response_id",
    "reasoning",
    "text",
    "user",
)


def parse_responses(body: Any) -> ResponsesRequest:
    """Validate a /v1/responses body as vLLM's ResponsesRequest does (the fields the stand-in
    reads; others are accepted and ignored, as vLLM logs and ignores unknown fields)."""
    body = object_body(body)
    if body.get("prompt") is not None:  # ResponsesRequest.validate_prompt
        raise validator_error(body, "prompt template is not supported", param="prompt")
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):  # check_cache_salt_support
        raise validator_error(
            body, ValueError("Parameter 'cache_salt' must be a non-empty string if provided.")
        )
    errors: list[FieldError] = []
    if "input" not in body:
        errors.append(missing("body.input", body))
    stream = flag(body, "stream", False, errors)
    background = flag(body, "background", False, errors)
    store = flag(body, "store", True, errors)
    max_output_tokens = None
    if body.get("max_output_tokens") is not None:
        max_output_tokens, err = lax_int(body["max_output_tokens"], "body.max_output_tokens")
        if err is not None:
            errors.append(err)
    numbers: dict[str, float] = {}
    for name, default in (("temperature", _DEFAULT_TEMPERATURE), ("top_p", _DEFAULT_TOP_P)):
        value, err = (default, None)
        if body.get(name) is not None:
            value, err = lax_float(body[name], f"body.{name}")
        if err is not None:
            errors.append(err)
        numbers[name] = float(value if value is not None else default)
    tools = body.get("tools")
    if tools is None:
        tools = []
    elif not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        errors.append(FieldError("list_type", "body.tools", "Input should be a valid list", tools))
        tools = []
    tool_choice = body.get("tool_choice", "auto")
    include = body.get("include") or []
    if not isinstance(include, list):
        errors.append(
            FieldError("list_type", "body.include", "Input should be a valid list", include)
        )
        include = []
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        errors.append(
            FieldError(
                "string_type", "body.instructions", "Input should be a valid string", instructions
            )
        )
    elif instructions:
        # construct_input_messages: the instructions are a system message first
        messages.append({"role": "system", "content": instructions})
    raw_input = body.get("input")
    if isinstance(raw_input, str):
        messages.append({"role": "user", "content": raw_input})
    elif isinstance(raw_input, list):
        messages += _input_items(raw_input, errors)
    elif "input" in body:
        errors.append(
            FieldError("string_type", "body.input.str", "Input should be a valid string", raw_input)
        )
    if errors:
        raise validation_error(errors)
    request_id = body.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        request_id = f"resp_{uuid.uuid4().hex}"
    # construct_tool_dicts: the request's tools (an empty list by default) reach the chat
    # template unless tool_choice is "none"
    tool_dicts = (
        None
        if tool_choice == "none"
        else [{"type": "function", "function": _tool_dump(t)} for t in tools]
    )
    top_logprobs = body.get("top_logprobs", 0)
    include_logprobs = "message.output_text.logprobs" in include
    echo = {name: body.get(name) for name in _ECHOED}
    echo.update(
        background=background,
        parallel_tool_calls=body.get("parallel_tool_calls", True),
        service_tier=body.get("service_tier", "auto"),
        tool_choice=tool_choice,
        tools=[_tool_dump(t) for t in tools],
        truncation=body.get("truncation") or "disabled",
        top_logprobs=top_logprobs if include_logprobs else None,
        **numbers,
    )
    return ResponsesRequest(
        request_id=request_id,
        messages=tuple(messages),
        tool_dicts=tool_dicts,
        stream=stream,
        max_output_tokens=max_output_tokens,
        echo=echo,
        include_logprobs=include_logprobs,
        store=store,
    )


def _tool_dump(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A function tool as vLLM dumps the openai SDK's FunctionTool for the template: its
    fields in the model's order, unset ones null (other tool types as given)."""
    if tool.get("type", "function") != "function":
        return dict(tool)
    return {
        "name": tool.get("name"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict"),
        "type": "function",
        "description": tool.get("description"),
    }


def check_responses(req: ResponsesRequest) -> None:
    """What create_responses refuses after the model check: background mode (vLLM's default,
    VLLM_ENABLE_RESPONSES_API_STORE unset, keeps nothing, so it cannot run a response in the
    background: _validate_create_responses_input) and a previous response (none is kept)."""
    e = req.echo
    if e["background"] and req.store:
        raise ApiError(
            "This vLLM engine does not support `store=True` and therefore does not support "
            "the background mode. To enable these features, set the environment variable "
            "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server.",
            param="background",
            kind="invalid_request_error",
        )
    if e["previous_response_id"] is not None:
        raise not_found(str(e["previous_response_id"]))


def _input_items(items: list[Any], errors: list[FieldError]) -> list[dict[str, Any]]:
    """Chat messages from a list of input items (construct_chat_messages_with_tool_call):
    messages as they are, function calls as assistant tool calls, their outputs as tool
    messages."""
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        loc = f"body.input.list.{i}"
        if not isinstance(item, dict):
            errors.append(FieldError("dict_type", loc, "Input should be a valid dictionary", item))
            continue
        kind = item.get("type", "message")
        if kind == "function_call":
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": item.get("call_id"),
                            "type": "function",
                            "function": {
                                "name": item.get("name"),
                                "arguments": item.get("arguments"),
                            },
                        }
                    ],
                }
            )
        elif kind == "function_call_output":
            out.append(
                {"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")}
            )
        elif kind == "message" and isinstance(item.get("role"), str):
            content = text_content(item.get("content"), f"{loc}.content", errors)
            out.append({"role": item["role"], "content": content})
        else:
            raise ApiError(
                f"input[{i}]: the simulated model reads messages, function calls and their "
                f"outputs, not items of type {kind!r}",
                param="input",
            )
    return out


def not_found(response_id: str) -> ApiError:
    """vLLM keeps no responses by default (VLLM_ENABLE_RESPONSES_API_STORE unset): every
    lookup of a stored response misses."""
    return ApiError(
        f"Response with id '{response_id}' not found.",
        param="response_id",
        status=404,
        kind="invalid_request_error",
    )


def prompt_too_long(prompt_tokens: int, max_model_len: int) -> ApiError:
    """_validate_generator_input: the prompt must leave room for one output token."""
    return ApiError(
        f"The engine prompt length {prompt_tokens} exceeds the max_model_len {max_model_len}. "
        "Please reduce prompt.",
        param="input",
        kind="invalid_request_error",
    )


def usage(input_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, Any]:
    """ResponseUsage (vLLM's SimpleContext keeps no per-turn metrics: the lists are empty)."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": cached_tokens,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": 0,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": input_tokens + output_tokens,
    }


def output_text_part(text: str, logprobs: list[Any] | None) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}


def message_item(
    item_id: str, parts: list[dict[str, Any]], status: str, **extra: Any
) -> dict[str, Any]:
    """A ResponseOutputMessage as the openai SDK's model dumps it (`phase` unset)."""
    return {
        "id": item_id,
        "content": parts,
        "role": "assistant",
        "status": status,
        "type": "message",
        "phase": None,
        **extra,
    }


def response_body(
    req: ResponsesRequest,
    *,
    model: str,
    created_at: int,
    max_output_tokens: int,
    output: list[dict[str, Any]],
    status: str,
    usage_body: dict[str, Any] | None,
) -> dict[str, Any]:
    """ResponsesResponse.from_request, dumped: every field, None included, in its order."""
    e = req.echo
    return {
        "id": req.request_id,
        "created_at": created_at,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": e["instructions"],
        "metadata": e["metadata"],
        "model": model,
        "object": "response",
        "output": output,
        "parallel_tool_calls": e["parallel_tool_calls"],
        "temperature": e["temperature"],
        "tool_choice": e["tool_choice"],
        "tools": e["tools"],
        "top_p": e["top_p"],
        "background": e["background"],
        "max_output_tokens": max_output_tokens,
        "max_tool_calls": e["max_tool_calls"],
        "previous_response_id": e["previous_response_id"],
        "prompt": None,
        "reasoning": e["reasoning"],
        "service_tier": e["service_tier"],
        "status": status,
        "text": e["text"],
        "top_logprobs": e["top_logprobs"],
        "truncation": e["truncation"],
        "usage": usage_body,
        "user": e["user"],
        "input_messages": None,
        "output_messages": None,
    }


def final_output(text: str, logprobs: list[Any] | None) -> list[dict[str, Any]]:
    """_make_response_output_items without a reasoning or tool parser: one completed
    assistant message holding the text (none when the text is empty), under a fresh id."""
    if not text:
        return []
    return [
        message_item(f"msg_{uuid.uuid4().hex}", [output_text_part(text, logprobs)], "completed")
    ]


class ResponseEvents:
    """The events of one streamed response, numbered as vLLM numbers them: response.created
    and response.in_progress, then (with the first text) output_item.added and
    content_part.added, one output_text.delta per batch of tokens, and at the end
    output_text.done, content_part.done, output_item.done and response.completed.

    Quirks kept from vLLM's _process_simple_streaming_events: the streamed item's id is a bare
    UUID (the completed response names its message "msg_..." afresh), content_index counts up
    by one for every event after the content part is added, and the done item carries an
    empty `summary`."""

    def __init__(self, initial: dict[str, Any]) -> None:
        self.seq = 0
        self.initial = initial
        self.item_id = ""
        self.content_index = 0
        self.text: list[str] = []

    def _event(self, kind: str, **fields: Any) -> bytes:
        body = {**fields, "sequence_number": self.seq, "type": kind}
        self.seq += 1
        return event(body, kind)

    def start(self) -> list[bytes]:
        return [
            self._event("response.created", response=self.initial),
            self._event("response.in_progress", response=self.initial),
        ]

    def delta(self, text: str) -> list[bytes]:
        """Events for a batch of new text (nothing for an empty batch, as vLLM skips an empty
        delta message)."""
        if not text:
            return []
        out = []
        if not self.text:
            self.item_id = str(uuid.uuid4())
            out.append(
                self._event(
                    "response.output_item.added",
                    item=message_item(self.item_id, [], "in_progress"),
                    output_index=0,
                )
            )
            out.append(
                self._event(
                    "response.content_part.added",
                    content_index=self.content_index,
                    item_id=self.item_id,
                    output_index=0,
                    part=output_text_part("", []),
                )
            )
            self.content_index += 1
        out.append(
            self._event(
                "response.output_text.delta",
                content_index=self.content_index,
                delta=text,
                item_id=self.item_id,
                logprobs=[],
                output_index=0,
            )
        )
        self.content_index += 1
        self.text.append(text)
        return out

    def finish(self, final: dict[str, Any]) -> list[bytes]:
        out = []
        if self.text:
            text = "".join(self.text)
            out.append(
                self._event(
                    "response.output_text.done",
                    content_index=self.content_index,
                    item_id=self.item_id,
                    logprobs=[],
                    output_index=0,
                    text=text,
                )
            )
            self.content_index += 1
            part = output_text_part(text, None)
            out.append(
                self._event(
                    "response.content_part.done",
                    content_index=self.content_index,
                    item_id=self.item_id,
                    output_index=0,
                    part=part,
                )
            )
            self.content_index += 1
            out.append(
                self._event(
                    "response.output_item.done",
                    item=message_item(self.item_id, [part], "completed", summary=[]),
                    output_index=0,
                )
            )
        out.append(self._event("response.completed", response=final))
        return out


def error_event(message: str, seq: int) -> bytes:
    """A stream's error event (the simulation stopped mid-response)."""
    body = {
        "type": "error",
        "code": None,
        "message": message,
        "param": None,
        "sequence_number": seq,
    }
    return event(body, "error")
