"""Prompts of the stand-in vLLM server, tokenised: a completion's text or token ids, chat
messages rendered by the model's chat template (for /v1/chat/completions, /tokenize and
/v1/responses alike), and the cache segments the simulated engine keys its prefix cache on.
Pure functions; no I/O.

Token counts follow vLLM (github.com/vllm-project/vllm; behaviour, not code): a chat prompt is
the template rendered and tokenised without extra special tokens (the template's one
<|begin_of_text|>), a text prompt on /v1/completions gets BOS prepended (add_special_tokens'
default), a token-id prompt counts its ids (serving_completion, serving_chat, chat_utils).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferledger.core.errors import BadInputError
from inferledger.sim_errors import (
    ApiError,
    FieldError,
    field_error,
    text_content,
    validation_error,
    validator_error,
)
from models.serving.request import Segment
from models.tokenizer import Tokenizer, llama3_tokenizer


def _chain(previous: bytes, chunk: bytes) -> bytes:
    return hashlib.blake2b(previous + chunk, digest_size=12).digest()


def token_id_segments(ids: Sequence[int], block_size: int) -> tuple[Segment, ...]:
    """Segments of a prompt's token ids for prefix caching: one per block_size ids, keyed by a
    hash chained over every id before it (the last, shorter one included), so two prompts
    share cache exactly as far as their full blocks of tokens agree, as vLLM's chained block
    hashes do."""
    out: list[Segment] = []
    h = b"ids"
    for i in range(0, len(ids), block_size):
        chunk = ids[i : i + block_size]
        h = _chain(h, b",".join(str(t).encode() for t in chunk))
        out.append((h.hex(), len(chunk)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt, tokenised: its ids, its text (what echo shows) and its cache segments."""

    ids: tuple[int, ...]
    text: str
    segments: tuple[Segment, ...]

    @classmethod
    def of(cls, ids: Sequence[int], text: str, block_size: int) -> Prompt:
        ids = tuple(ids)
        return cls(ids, text, token_id_segments(ids, block_size))


# --- chat -------------------------------------------------------------------------------------


def render_chat(messages: Sequence[Mapping[str, Any]], tok: Tokenizer | None = None) -> str:
    """The prompt the model's chat template renders (Llama-3.1-Instruct's)."""
    return (tok or llama3_tokenizer()).render_chat(messages)


def render_template(tok: Tokenizer, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> str:
    """The chat template's text; a template error is a 400, as vLLM answers jinja's
    TemplateError ("<error> <its cause>")."""
    try:
        return tok.render_chat(messages, **kwargs)
    except BadInputError as exc:
        raise ApiError(f"{exc} None") from None


def tool_param(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A ChatCompletionToolsParam as vLLM dumps it for the template (serving_chat's and
    create_tokenize's tool_dicts)."""
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else {}
    return {
        "type": tool.get("type", "function"),
        "function": {
            "name": fn.get("name"),
            "description": fn.get("description"),
            "parameters": fn.get("parameters"),
        },
    }


def chat_prompt(
    tok: Tokenizer,
    messages: Sequence[Mapping[str, Any]],
    block_size: int,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> Prompt:
    """Messages rendered by the template (tools as the template gets them) and tokenised with
    add_special_tokens=False: the template's own <|begin_of_text|> is the only BOS."""
    rendered = render_template(tok, messages, tools=tools)
    return Prompt.of(tok.encode(rendered), rendered, block_size)


def chat_completion_prompt(body: Mapping[str, Any], tok: Tokenizer, block_size: int) -> Prompt:
    """The prompt of a /v1/chat/completions body: its messages (each with a string role;
    text content) and its tools."""
    messages = body.get("messages")
    if messages is None:
        raise field_error("missing", ("messages",), "Field required", body)
    if not isinstance(messages, list):
        raise field_error("list_type", ("messages",), "Input should be a valid list", messages)
    if not messages:
        raise ApiError("'messages' must be a non-empty list of messages", param="messages")
    flat = []
    errors: list[FieldError] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(
                f"messages[{i}] must be an object with a string 'role'", param="messages"
            )
        content = text_content(m.get("content"), f"body.messages.{i}.content", errors)
        flat.append({**m, "content": content})
    if errors:
        raise validation_error(errors)
    tools = body.get("tools")
    params = [tool_param(t) for t in tools] if isinstance(tools, list) and tools else None
    return chat_prompt(tok, flat, block_size, params)


# --- completions ------------------------------------------------------------------------------


def completion_prompts(
    body: Mapping[str, Any], tok: Tokenizer, block_size: int
) -> tuple[Prompt, ...]:
    """A prompt, or a batch: a string, a list of token ids, a list of strings, a list of
    token-id lists (serving_completion answers one choice per prompt, in order)."""
    raw = body.get("prompt")
    if raw is None or raw == "":
        raise validator_error(
            body, "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"
        )
    items: list[Any]
    if isinstance(raw, str) or (isinstance(raw, list) and raw and all(_is_id(t) for t in raw)):
        items = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(p, (str, list)) for p in raw):
        items = raw
    else:
        if isinstance(raw, list) and not raw:
            raise ApiError("The decoder prompt cannot be empty", param="prompt")
        raise field_error("string_type", ("prompt",), "Input should be a valid string", raw)
    out = []
    for p in items:
        if not p:
            raise ApiError("The decoder prompt cannot be empty", param="prompt")
        if isinstance(p, str):
            out.append(Prompt.of(tok.encode(p, add_bos=True), p, block_size))
            continue
        if not all(_is_id(t) for t in p):
            raise field_error("int_type", ("prompt",), "Input should be a valid integer", p)
        bad = [t for t in p if not tok.is_valid_id(t)]
        if bad:
            raise ApiError(f"Token id {bad[0]} is out of vocabulary", param="prompt")
        out.append(Prompt.of(p, tok.decode(p), block_size))
    return tuple(out)


def _is_id(t: Any) -> bool:
    return isinstance(t, int) and not isinstance(t, bool)
