"""The OpenAI-compatible protocol of the simulated vLLM server: the response and SSE-chunk
shapes of vLLM's /v1/completions and /v1/chat/completions. Pure functions; no I/O. Requests are
validated in inferledger/sim_requests.py, prompts tokenised in inferledger/sim_prompts.py,
errors written in inferledger/sim_errors.py (all three re-exported here), and
inferledger/sim_outputs.py decides what each choice generates.

Shapes (github.com/vllm-project/vllm): ChatCompletionResponse, ChatMessage,
ChatCompletionLogProbs, ChatCompletionStreamResponse in
vllm/entrypoints/openai/chat_completion/protocol.py; CompletionResponse, CompletionLogProbs,
CompletionStreamResponse in vllm/entrypoints/openai/completion/protocol.py; UsageInfo; the
named-tool-choice output and finish reasons of serving_chat; echo and logprobs of
serving_completion. docs/sim-server.md documents them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from inferledger.sim_errors import ApiError, dumps, vllm_error
from inferledger.sim_outputs import FILLER, FILLER_WORDS, filler_text, shown_text, step_logprobs
from inferledger.sim_prompts import Prompt, render_chat, token_id_segments
from inferledger.sim_requests import (
    DEFAULT_MAX_TOKENS,
    ApiLimits,
    Choice,
    ParsedRequest,
    child_request_id,
    parse_request,
    plan_choices,
)
from models.serving.records import RequestRecord
from models.serving.request import FinishReason

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DONE",
    "FILLER",
    "FILLER_WORDS",
    "ApiError",
    "ApiLimits",
    "Choice",
    "ChunkWriter",
    "ParsedRequest",
    "Prompt",
    "child_request_id",
    "dumps",
    "event",
    "filler_text",
    "finish_reason",
    "full_response",
    "parse_request",
    "plan_choices",
    "render_chat",
    "token_id_segments",
    "usage",
    "vllm_error",
]

# --- responses --------------------------------------------------------------------------------


def finish_reason(record: RequestRecord | None) -> str | None:
    """The OpenAI finish_reason of a finished request (None while it runs)."""
    if record is None:
        return None
    return record.finish_reason.value


def usage(parsed: ParsedRequest, completion_tokens: int, cached: int | None) -> dict[str, Any]:
    """The `usage` object (UsageInfo); prompt_tokens_details.cached_tokens (vLLM's
    --enable-prompt-tokens-details) once the prefix-cache hit is known."""
    prompt_tokens = sum(len(p.ids) for p in parsed.prompts) or parsed.prompt_tokens
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def _tool_call_id(request_id: str, index: int) -> str:
    digest = hashlib.blake2b(f"{request_id}/{index}".encode(), digest_size=16).hexdigest()
    return f"chatcmpl-tool-{digest}"


def _stop_reason(record: RequestRecord, choice: Choice) -> str | int | None:
    if record.finish_reason is FinishReason.STOP and record.output_tokens == choice.plan.length:
        return choice.plan.stop_reason
    return None


def _finish(parsed: ParsedRequest, record: RequestRecord | None) -> str | None:
    reason = finish_reason(record)
    if reason == "stop" and parsed.tool_required:
        return "tool_calls"  # serving_chat: "required" tool choice that ended by itself
    return reason


def _chat_logprobs(
    parsed: ParsedRequest, choice: Choice, start: int, stop: int
) -> dict[str, Any] | None:
    """ChatCompletionLogProbs of output tokens start..stop-1."""
    if parsed.logprobs is None:
        return None
    tok = parsed.tokenizer
    content = []
    for i in range(start, stop):
        token_id = choice.plan.ids[i]
        pairs = step_logprobs(tok, token_id, i, choice.seed, parsed.logprobs)
        text = tok.token_text(token_id)
        top = [
            {"token": tok.token_text(t), "logprob": v, "bytes": list(tok.token_text(t).encode())}
            for t, v in pairs[: parsed.logprobs]
        ]
        content.append(
            {
                "token": text,
                "logprob": pairs[0][1],
                "bytes": list(text.encode()),
                "top_logprobs": top,
            }
        )
    return {"content": content}


def _completion_logprobs(
    parsed: ParsedRequest, choice: Choice, start: int, stop: int, offset: int, echo: bool
) -> dict[str, Any] | None:
    """CompletionLogProbs of output tokens start..stop-1 (the prompt's first when echoed, the
    first prompt token with no logprob, as vLLM's prompt_logprobs), text offsets from
    `offset`."""
    if parsed.logprobs is None:
        return None
    tok = parsed.tokenizer
    out: dict[str, Any] = {
        "text_offset": [],
        "token_logprobs": [],
        "tokens": [],
        "top_logprobs": [],
    }
    k = parsed.logprobs
    steps: list[tuple[int, list | None]] = []
    if echo:
        for i, t in enumerate(choice.prompt.ids):
            steps.append((t, None if i == 0 else step_logprobs(tok, t, -i, choice.seed, k)))
    for i in range(start, stop):
        t = choice.plan.ids[i]
        steps.append((t, step_logprobs(tok, t, i, choice.seed, k)))
    pos = offset
    for t, pairs in steps:
        text = tok.token_text(t)
        out["tokens"].append(text)
        out["text_offset"].append(pos)
        pos += len(text)
        if pairs is None:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
        else:
            out["token_logprobs"].append(pairs[0][1])
            out["top_logprobs"].append({tok.token_text(a): v for a, v in pairs[: k + 1]})
    return out


def _message(parsed: ParsedRequest, choice: Choice, text: str, request_id: str) -> dict[str, Any]:
    """ChatMessage: a named (or "required") tool choice puts the generated JSON in tool_calls
    and leaves content empty, as serving_chat does; tool_calls is left out when empty."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": None,
    }
    if parsed.tool_name is not None:
        message["content"] = ""
        message["tool_calls"] = [
            {
                "id": _tool_call_id(request_id, choice.index),
                "type": "function",
                "function": {"name": parsed.tool_name, "arguments": text},
            }
        ]
    return message


def full_response(
    parsed: ParsedRequest,
    records: RequestRecord | Sequence[RequestRecord],
    request_id: str,
    created: int,
) -> dict[str, Any]:
    """The non-streaming response body (ChatCompletionResponse / CompletionResponse) once every
    choice's record is in (`records` in choice order)."""
    if isinstance(records, RequestRecord):
        records = [records]
    tok = parsed.tokenizer
    choices = plan_choices(parsed, request_id)
    out = []
    completion = 0
    for choice, record in zip(choices, records, strict=True):
        count = record.output_tokens
        completion += count
        text = shown_text(tok, choice.plan, 0, count)
        body: dict[str, Any]
        if parsed.chat:
            body = {
                "index": choice.index,
                "message": _message(parsed, choice, text, request_id),
                "logprobs": _chat_logprobs(parsed, choice, 0, count),
            }
        else:
            prefix = choice.prompt.text if parsed.echo else ""
            body = {
                "index": choice.index,
                "text": prefix + text,
                "logprobs": _completion_logprobs(parsed, choice, 0, count, 0, parsed.echo),
            }
        body["finish_reason"] = _finish(parsed, record)
        body["stop_reason"] = _stop_reason(record, choice)
        body["token_ids"] = None
        if not parsed.chat:
            body["prompt_logprobs"] = None
            body["prompt_token_ids"] = None
        out.append(body)
    cached = _cached(parsed, choices, records)
    head: dict[str, Any] = {
        "id": request_id,
        "object": "chat.completion" if parsed.chat else "text_completion",
        "created": created,
        "model": parsed.model,
        "choices": out,
    }
    head["service_tier"] = None
    head["system_fingerprint"] = None
    head["usage"] = usage(parsed, completion, cached)
    if parsed.chat:
        head["prompt_logprobs"] = None
        head["prompt_token_ids"] = None
    head["kv_transfer_params"] = None
    return head


def _cached(
    parsed: ParsedRequest, choices: Sequence[Choice], records: Sequence[RequestRecord]
) -> int | None:
    """Cached prompt tokens: each prompt's first choice's hit, summed."""
    total: int | None = None
    for choice, record in zip(choices, records, strict=False):
        if choice.index % parsed.n == 0 and record.cached_tokens is not None:
            total = (total or 0) + record.cached_tokens
    return total


class ChunkWriter:
    """The SSE events of one choice of a streamed response, in vLLM's format: `data: {json}`
    chunks, a role chunk before a chat's first content, finish_reason (and stop_reason) on the
    chunk with the last text, logprobs of each chunk's tokens when asked, tool-call deltas for
    a named tool choice, an optional usage chunk (stream_options.include_usage; usage on every
    chunk with continuous_usage_stats), and `data: [DONE]`."""

    def __init__(
        self, parsed: ParsedRequest, request_id: str, created: int, choice: int = 0
    ) -> None:
        self.parsed = parsed
        self.request_id = request_id
        self.choice = plan_choices(parsed, request_id)[choice]
        self.head = {
            "id": request_id,
            "object": "chat.completion.chunk" if parsed.chat else "text_completion",
            "created": created,
            "model": parsed.model,
        }
        self.sent = 0  # output tokens sent so far
        self._chars = 0  # characters of their text sent
        self._offset = 0  # the next logprobs text_offset (completions)
        self._started = False

    def tokens(
        self, upto: int, reason: str | None, record: RequestRecord | None = None
    ) -> list[bytes]:
        """Events for output tokens sent..upto-1 (the last ones of the choice when reason is
        set): one chunk (and the role chunk first in a chat)."""
        out = []
        parsed = self.parsed
        if parsed.chat and not self._started and (upto > 0 or reason is not None):
            out.append(self._chunk({"role": "assistant", "content": ""}, None, None, None))
        if upto > self.sent or reason is not None:
            start = self.sent
            upto = max(upto, start)
            text = shown_text(parsed.tokenizer, self.choice.plan, start, upto, self._chars)
            self._chars += len(text)
            self.sent = upto
            stop_reason = None
            if reason is not None:
                stop_reason = (
                    self.choice.plan.stop_reason
                    if (reason == "stop" and upto == self.choice.plan.length)
                    else None
                )
                if reason == "stop" and parsed.tool_required:
                    reason = "tool_calls"
            if parsed.chat:
                delta = self._delta(text, reason, start)
                lp = _chat_logprobs(parsed, self.choice, start, upto)
            else:
                echo = parsed.echo and not self._started
                prefix = self.choice.prompt.text if echo else ""
                delta = {"content": prefix + text}
                lp = _completion_logprobs(parsed, self.choice, start, upto, self._offset, echo)
                if lp is not None and lp["tokens"]:  # offsets run on over the chunks
                    self._offset = lp["text_offset"][-1] + len(lp["tokens"][-1])
            out.append(self._chunk(delta, reason, stop_reason, lp))
        self._started = self._started or bool(out)
        return out

    def _delta(self, text: str, reason: str | None, start: int) -> dict[str, Any]:
        parsed = self.parsed
        if parsed.tool_name is None:
            return {"content": text} if (text or not reason) else {}
        if not text and reason:
            return {}
        call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
        if start == 0:
            call = {
                "id": _tool_call_id(self.request_id, self.choice.index),
                "type": "function",
                "index": 0,
                "function": {"name": parsed.tool_name, "arguments": text},
            }
        return {"tool_calls": [call]}

    def usage(self, record: RequestRecord | Sequence[RequestRecord]) -> list[bytes]:
        """The usage event (when asked for) and the end of the stream."""
        records = [record] if isinstance(record, RequestRecord) else list(record)
        out = []
        if self.parsed.include_usage:
            choices = plan_choices(self.parsed, self.request_id)
            body = {
                **self.head,
                "choices": [],
                "usage": usage(
                    self.parsed,
                    sum(r.output_tokens for r in records),
                    _cached(self.parsed, choices, records),
                ),
            }
            out.append(event(body))
        out.append(DONE)
        return out

    def _chunk(
        self,
        delta: dict[str, Any],
        reason: str | None,
        stop_reason: str | int | None,
        logprobs: dict[str, Any] | None,
    ) -> bytes:
        choice: dict[str, Any]
        index = self.choice.index
        if self.parsed.chat:
            choice = {"index": index, "delta": delta, "logprobs": logprobs}
        else:
            choice = {"index": index, "text": delta.get("content", ""), "logprobs": logprobs}
        choice["finish_reason"] = reason
        choice["stop_reason"] = stop_reason
        body: dict[str, Any] = {**self.head, "choices": [choice]}
        if self.parsed.continuous_usage:
            body["usage"] = usage(self.parsed, self.sent, None)
        return event(body)


#: the last event of every completion and chat stream
DONE = b"data: [DONE]\n\n"


def event(body: Any, name: str | None = None) -> bytes:
    """One server-sent event carrying a JSON body; a named one (the Responses API's, framed
    as vLLM's responses router frames them) starts with its `event:` line."""
    head = b"" if name is None else b"event: " + name.encode() + b"\n"
    return head + b"data: " + dumps(body) + b"\n\n"
