"""The protocol of the stand-in vLLM server's /tokenize and /detokenize: vLLM's
TokenizeCompletionRequest | TokenizeChatRequest, TokenizeResponse and DetokenizeRequest
(vllm/entrypoints/serve/tokenize/protocol.py and serving.py; behaviour, not code). Pure
functions; no I/O. docs/sim-server.md ("Endpoints") is the user's guide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferledger.sim_errors import (
    ApiError,
    FieldError,
    VLLMValidationError,
    flag,
    lax_int,
    missing,
    object_body,
    text_content,
    validation_error,
)


@dataclass(frozen=True, slots=True)
class TokenizeRequest:
    """A validated /tokenize body: a text prompt, or chat messages to render first."""

    prompt: str | None
    messages: tuple[dict[str, Any], ...]
    add_special_tokens: bool
    add_generation_prompt: bool
    continue_final_message: bool
    return_token_strs: bool
    tools: list[dict[str, Any]] | None


_COMPLETION = "body.TokenizeCompletionRequest"
_NOT_A_STRING = "Input should be a valid string"
_CHAT = "body.TokenizeChatRequest"
#: transformers' apply_chat_template refusing both (vLLM answers "<error> <its cause>")
_NOT_COMPATIBLE = (
    "continue_final_message and add_generation_prompt are not compatible. Use "
    "continue_final_message when you want the model to continue the final message, and "
    "add_generation_prompt when you want to add a header that will prompt it to start a new "
    "assistant message instead. None"
)


def parse_tokenize(body: Any) -> TokenizeRequest:
    """Validate a /tokenize body as vLLM's TokenizeCompletionRequest | TokenizeChatRequest
    union does: the first member the body is valid for wins ("prompt": a completion request,
    add_special_tokens true by default; "messages": a chat request, the template's own BOS
    only); when it is valid for neither, the errors of both members are reported, the
    completion request's first, as pydantic reports a union."""
    body = object_body(body, _COMPLETION, _CHAT)
    completion_errors: list[FieldError] = []
    if "prompt" not in body:
        completion_errors.append(missing(f"{_COMPLETION}.prompt", body))
    elif not isinstance(prompt := body["prompt"], str):
        completion_errors.append(
            FieldError("string_type", f"{_COMPLETION}.prompt", _NOT_A_STRING, prompt)
        )
    special = flag(body, "add_special_tokens", True, completion_errors, _COMPLETION)
    strs = flag(body, "return_token_strs", False, completion_errors, _COMPLETION)
    if not completion_errors:
        return TokenizeRequest(body["prompt"], (), special, False, False, strs, None)
    chat_errors: list[FieldError] = []
    if body.get("continue_final_message") and body.get("add_generation_prompt"):
        # TokenizeChatRequest.check_generation_prompt, a validator run before the fields'
        message = "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        chat_errors.append(
            FieldError(
                "value_error",
                _CHAT,
                f"Value error, {message}",
                body,
                {"error": VLLMValidationError(message)},
            )
        )
        raise validation_error(completion_errors + chat_errors)
    if "messages" not in body:
        chat_errors.append(missing(f"{_CHAT}.messages", body))
        messages: list[dict[str, Any]] = []
    else:
        messages = chat_messages(body["messages"], f"{_CHAT}.messages", chat_errors)
    generation = flag(body, "add_generation_prompt", True, chat_errors, _CHAT)
    final = flag(body, "continue_final_message", False, chat_errors, _CHAT)
    special = flag(body, "add_special_tokens", False, chat_errors, _CHAT)
    strs = flag(body, "return_token_strs", False, chat_errors, _CHAT)
    tools = body.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        chat_errors.append(
            FieldError("list_type", f"{_CHAT}.tools", "Input should be a valid list", tools)
        )
    if chat_errors:
        raise validation_error(completion_errors + chat_errors)
    if final and generation:
        # add_generation_prompt left at its default: the validator let it through, the
        # template refuses it
        raise ApiError(_NOT_COMPATIBLE)
    return TokenizeRequest(None, tuple(messages), special, generation, final, strs, tools)


def chat_messages(raw: Any, loc: str, errors: list[FieldError]) -> list[dict[str, Any]]:
    """Chat messages for the template: {"role", "content"} with text content (a list of text
    parts is joined with newlines, as vLLM's chat_utils does for a string-content template);
    assistant `tool_calls` and tool messages are kept for the template."""
    if not isinstance(raw, list):
        errors.append(FieldError("list_type", loc, "Input should be a valid list", raw))
        return []
    out: list[dict[str, Any]] = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            errors.append(
                FieldError("dict_type", f"{loc}.{i}", "Input should be a valid dictionary", m)
            )
            continue
        if not isinstance(m.get("role"), str):
            errors.append(missing(f"{loc}.{i}.role", m))
            continue
        message = {k: v for k, v in m.items() if k in ("role", "tool_calls", "tool_call_id")}
        message["content"] = text_content(m.get("content"), f"{loc}.{i}.content", errors)
        out.append(message)
    return out


def parse_detokenize(body: Any) -> list[int]:
    """The token ids of a /detokenize body (each 0 <= id <= 2**63 - 1, as vLLM's
    DetokenizeRequest declares them)."""
    body = object_body(body)
    if "tokens" not in body:
        raise validation_error([missing("body.tokens", body)])
    raw = body["tokens"]
    if not isinstance(raw, list):
        raise validation_error(
            [FieldError("list_type", "body.tokens", "Input should be a valid list", raw)]
        )
    ids: list[int] = []
    errors: list[FieldError] = []
    for i, value in enumerate(raw):
        loc = f"body.tokens.{i}"
        n, err = lax_int(value, loc)
        if err is not None:
            errors.append(err)
        elif n is not None and n < 0:
            errors.append(
                FieldError(
                    "greater_than_equal",
                    loc,
                    "Input should be greater than or equal to 0",
                    value,
                    {"ge": 0},
                )
            )
        elif n is not None and n > 2**63 - 1:
            errors.append(
                FieldError(
                    "less_than_equal",
                    loc,
                    f"Input should be less than or equal to {2**63 - 1}",
                    value,
                    {"le": 2**63 - 1},
                )
            )
        elif n is not None:
            ids.append(n)
    if errors:
        raise validation_error(errors)
    return ids


# GPT-2's byte-level alphabet, which Llama-3's Hugging Face tokenizer writes its vocabulary in:
# printable bytes stand for themselves, the rest map to U+0100 onwards ("Ġ" is a space).
def _byte_alphabet() -> dict[int, str]:
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_ALPHABET = _byte_alphabet()


def token_str(token_bytes: bytes) -> str:
    """A token as Hugging Face's convert_ids_to_tokens names it (vLLM's `token_strs`)."""
    return "".join(BYTE_ALPHABET[b] for b in token_bytes)
