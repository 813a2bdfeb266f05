"""The OpenAI-compatible protocol of the simulated vLLM server: prompts to simulator
segments, request validation with vLLM's error messages, and the response and SSE-chunk shapes
of vLLM's /v1/completions and /v1/chat/completions. Pure functions; no I/O.

Token estimation (no tokenizer): a text prompt has ceil(UTF-8 bytes / 4) tokens, at least 1;
a prompt of token ids has one token per id; a chat prompt is rendered ChatML-style first
(render_chat) and estimated the same way. Output: exactly max_tokens tokens (default 256), as
benchmark traffic with ignore_eos, of deterministic filler text. docs/sim-server.md documents
the rules.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferledger.core.errors import InferLedgerError
from models.serving.records import RequestRecord
from models.serving.request import Segment

DEFAULT_MAX_TOKENS = 256
BYTES_PER_TOKEN = 4  # the token-estimation rule: ceil(UTF-8 bytes / 4), at least 1
# Filler text: common English words that are one token each in the Llama, GPT and Qwen
# tokenizers, so a client that re-tokenizes the text counts about as many tokens as it got.
FILLER_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there one all we their has been if more when will "
    "would who so no"
)
FILLER = tuple(" " + w for w in FILLER_WORDS.split())


# --- prompts ----------------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """Prompt tokens of a text: its UTF-8 bytes / 4, rounded up, at least 1."""
    return max(1, -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN))


def _chain(previous: bytes, chunk: bytes) -> bytes:
    return hashlib.blake2b(previous + chunk, digest_size=12).digest()


def text_segments(text: str, block_size: int) -> tuple[Segment, ...]:
    """The prompt's segments for prefix caching: one per `block_size` tokens (4 x block_size
    UTF-8 bytes, one KV block), keyed by a hash chained over every byte before it, and a last,
    shorter one for the remainder. Two prompts share cache exactly as far as their full chunks
    are identical, as vLLM's chained block hashes do. The tokens sum to estimate_tokens(text)."""
    data = text.encode("utf-8")
    step = BYTES_PER_TOKEN * block_size
    out: list[Segment] = []
    h = b"text"
    for i in range(0, len(data), step):
        chunk = data[i : i + step]
        h = _chain(h, chunk)
        out.append((h.hex(), -(-len(chunk) // BYTES_PER_TOKEN)))
    return tuple(out) if out else (("empty", 1),)


def token_id_segments(ids: Sequence[int], block_size: int) -> tuple[Segment, ...]:
    """Segments of a prompt given as token ids: one per block_size ids, hash-chained."""
    out: list[Segment] = []
    h = b"ids"
    for i in range(0, len(ids), block_size):
        chunk = ids[i : i + block_size]
        h = _chain(h, b",".join(str(t).encode() for t in chunk))
        out.append((h.hex(), len(chunk)))
    return tuple(out)


def render_chat(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text a chat template would produce (ChatML-shaped), which the estimate counts."""
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def filler_text(start: int, stop: int) -> str:
    """The generated text of output tokens start..stop-1 (deterministic)."""
    n = len(FILLER)
    return "".join(FILLER[i % n] for i in range(start, stop))


# --- requests ---------------------------------------------------------------------------------


class ApiError(InferLedgerError):
    """An OpenAI-style error answer: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self, message: str, *, param: str | None = None, status: int = 400, kind: str = ""
    ) -> None:
        super().__init__(message)
        self.http_status = status
        self.param = param
        self.kind = kind or _ERROR_TYPES.get(status, "BadRequestError")

    def body(self) -> bytes:
        return dumps(
            {
                "error": {
                    "message": str(self),
                    "type": self.kind,
                    "param": self.param,
                    "code": self.http_status,
                }
            }
        )


# vLLM's ErrorResponse types, by status.
_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "BadRequestError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


@dataclass(frozen=True, slots=True)
class ApiLimits:
    """What request validation needs to know about the deployment."""

    model_names: tuple[str, ...]
    max_model_len: int
    block_size: int


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A validated completion or chat request."""

    chat: bool
    model: str
    prompt: tuple[Segment, ...]
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    params: dict[str, Any]  # sampling parameters the span reports (vLLM's do_tracing)


def _integer(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(f"'{name}' must be an integer, got {value!r}", param=name)
    return value


def _number(body: Mapping[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApiError(f"'{name}' must be a number, got {value!r}", param=name)
    return float(value)


def _prompt_of(body: Mapping[str, Any], block_size: int) -> tuple[tuple[Segment, ...], int]:
    if "prompt" not in body or body["prompt"] is None:
        raise ApiError("Missing required parameter: 'prompt'.", param="prompt")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError("The decoder prompt cannot be empty", param="prompt")
        return text_segments(prompt, block_size), estimate_tokens(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        return token_id_segments(prompt, block_size), len(prompt)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError(
            "the simulator serves one prompt per request; send a batch as separate requests",
            param="prompt",
        )
    raise ApiError(
        "'prompt' must be a string, a list of token ids, or a list of one of those",
        param="prompt",
    )


def _messages_text(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if messages is None:
        raise ApiError("Missing required parameter: 'messages'.", param="messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("'messages' must be a non-empty list of messages", param="messages")
    flat = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(
                f"messages[{i}] must be an object with a string 'role'", param="messages"
            )
        content = m.get("content")
        if content is None:
            text = ""
        elif isinstance(content, str):
            text = content
        elif isinstance(content, list):
            pieces = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise ApiError(
                        f"messages[{i}]: only text content parts are supported by this model",
                        param="messages",
                    )
                pieces.append(str(part.get("text", "")))
            text = "\n".join(pieces)
        else:
            raise ApiError(f"messages[{i}].content must be a string or a list", param="messages")
        flat.append({"role": m["role"], "content": text})
    return render_chat(flat)


def parse_request(body: Any, limits: ApiLimits, *, chat: bool) -> ParsedRequest:
    """Validate a decoded JSON body as vLLM's OpenAI server does; ApiError if it is not valid."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    model = body.get("model")
    if model is None:
        raise ApiError("you must provide a model parameter", param="model")
    if not isinstance(model, str) or model not in limits.model_names:
        raise ApiError(f"The model `{model}` does not exist.", param="model", status=404)
    if chat:
        text = _messages_text(body)
        prompt, prompt_tokens = text_segments(text, limits.block_size), estimate_tokens(text)
        max_tokens = _integer(body, "max_completion_tokens")
        name = "max_completion_tokens"
        if max_tokens is None:
            max_tokens, name = _integer(body, "max_tokens"), "max_tokens"
    else:
        prompt, prompt_tokens = _prompt_of(body, limits.block_size)
        max_tokens, name = _integer(body, "max_tokens"), "max_tokens"
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    elif max_tokens < 1:
        raise ApiError(f"max_tokens must be at least 1, got {max_tokens}.", param=name)
    min_tokens = _integer(body, "min_tokens")
    if min_tokens is not None and min_tokens < 0:
        raise ApiError(
            f"min_tokens must be greater than or equal to 0, got {min_tokens}.", param="min_tokens"
        )
    if min_tokens is not None and min_tokens > max_tokens:
        raise ApiError(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
            param="min_tokens",
        )
    n = _integer(body, "n")
    if n is not None and n != 1:
        raise ApiError("the simulator generates one choice per request (n=1)", param="n")
    limit = limits.max_model_len
    if prompt_tokens > limit:
        raise ApiError(
            f"This model's maximum context length is {limit} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
            param="messages" if chat else "prompt",
        )
    if max_tokens > limit - prompt_tokens:
        raise ApiError(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
            f"maximum context length is {limit} tokens and your request has {prompt_tokens} "
            f"input tokens ({max_tokens} > {limit} - {prompt_tokens}).",
            param=name,
        )
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ApiError(f"'stream' must be a boolean, got {stream!r}", param="stream")
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise ApiError(
                "Stream options can only be defined when `stream=True`.", param="stream_options"
            )
        if not isinstance(options, dict):
            raise ApiError("'stream_options' must be an object", param="stream_options")
    options = options or {}
    params = {
        "max_tokens": max_tokens,
        # vLLM's defaults when the request leaves them out; its span skips falsy values.
        "temperature": _number(body, "temperature", 1.0),
        "top_p": _number(body, "top_p", 1.0),
        "n": 1,
    }
    return ParsedRequest(
        chat=chat,
        model=model,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        continuous_usage=bool(options.get("continuous_usage_stats")),
        params=params,
    )


# --- responses --------------------------------------------------------------------------------


def dumps(obj: Any) -> bytes:
    """Compact JSON, UTF-8."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def finish_reason(record: RequestRecord | None) -> str | None:
    """The OpenAI finish_reason of a finished request (None while it runs)."""
    if record is None:
        return None
    return record.finish_reason.value


def usage(parsed: ParsedRequest, completion_tokens: int, cached: int | None) -> dict[str, Any]:
    """The `usage` object; prompt_tokens_details.cached_tokens (vLLM's
    --enable-prompt-tokens-details) once the prefix-cache hit is known."""
    out: dict[str, Any] = {
        "prompt_tokens": parsed.prompt_tokens,
        "total_tokens": parsed.prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def full_response(
    parsed: ParsedRequest, record: RequestRecord, request_id: str, created: int
) -> dict[str, Any]:
    """The non-streaming response body of a finished request."""
    text = filler_text(0, record.output_tokens)
    reason = finish_reason(record)
    choice: dict[str, Any]
    if parsed.chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": None,
            "finish_reason": reason,
            "stop_reason": None,
        }
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": reason,
            "stop_reason": None,
        }
    return {
        "id": request_id,
        "object": "chat.completion" if parsed.chat else "text_completion",
        "created": created,
        "model": parsed.model,
        "choices": [choice],
        "usage": usage(parsed, record.output_tokens, record.cached_tokens),
    }


class ChunkWriter:
    """The SSE events of one streamed response, in vLLM's format: `data: {json}` chunks, a
    role chunk before a chat's first content, finish_reason on the chunk with the last text,
    an optional usage chunk (stream_options.include_usage; usage on every chunk with
    continuous_usage_stats), and `data: [DONE]`."""

    def __init__(self, parsed: ParsedRequest, request_id: str, created: int) -> None:
        self.parsed = parsed
        self.head = {
            "id": request_id,
            "object": "chat.completion.chunk" if parsed.chat else "text_completion",
            "created": created,
            "model": parsed.model,
        }
        self.sent = 0  # output tokens sent so far

    def tokens(self, upto: int, reason: str | None) -> list[bytes]:
        """Events for output tokens sent..upto-1 (the last ones of the request when reason is
        set): one chunk (and the role chunk first in a chat)."""
        out = []
        if self.parsed.chat and self.sent == 0 and upto > 0:
            out.append(self._chunk({"role": "assistant", "content": ""}, None))
        if upto > self.sent or reason is not None:
            text = filler_text(self.sent, upto)
            self.sent = max(self.sent, upto)
            out.append(self._chunk({"content": text} if (text or not reason) else {}, reason))
        return out

    def usage(self, record: RequestRecord) -> list[bytes]:
        """The usage event (when asked for) and the end of the stream."""
        out = []
        if self.parsed.include_usage:
            body = {
                **self.head,
                "choices": [],
                "usage": usage(self.parsed, record.output_tokens, record.cached_tokens),
            }
            out.append(event(body))
        out.append(b"data: [DONE]\n\n")
        return out

    def _chunk(self, delta: dict[str, Any], reason: str | None) -> bytes:
        choice: dict[str, Any]
        if self.parsed.chat:
            choice = {"index": 0, "delta": delta, "logprobs": None}
        else:
            choice = {"index": 0, "text": delta.get("content", ""), "logprobs": None}
        choice["finish_reason"] = reason
        choice["stop_reason"] = None
        body: dict[str, Any] = {**self.head, "choices": [choice]}
        if self.parsed.continuous_usage:
            body["usage"] = usage(self.parsed, self.sent, None)
        return event(body)


def event(body: Any) -> bytes:
    """One server-sent event carrying a JSON body."""
    return b"data: " + dumps(body) + b"\n\n"
