"""Real token counts for the stand-in vLLM server: Llama-3's byte-level BPE, offline.

vLLM counts a prompt with the model's own tokenizer after applying its chat template; the
stand-in does the same for the models it serves (both catalog models are Llama-3.1, whose
tokenizer is Llama-3's). The vocabulary is Meta's `tokenizer.model` (128,000 ranked byte
sequences, tiktoken's format), shipped in models/data/tokenizers/llama3/ with its licence; the
encoder is tiktoken's, built with Llama-3's pre-tokenisation pattern and its 256 special tokens
as Llama-3.1-Instruct's Hugging Face tokenizer names them. Loading checks the file's SHA-256.

Sources (behaviour, not code): meta-llama/llama-models models/llama3_1/api/tokenizer.py (the
pattern, the special tokens) and Llama-3.1-Instruct's chat template (tokenizer_config.json on
Hugging Face; docs/sim-server.md quotes the rendering). docs/sim-server.md reports how the
counts compare with Hugging Face's tokenizer.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import tiktoken
from tiktoken.load import load_tiktoken_bpe

from inferledger.core.errors import BadInputError
from models.model_catalog import get_model

LLAMA3_SHA256 = "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55"
# Llama-3's pre-tokenisation: contractions, letter runs with one leading non-letter, numbers
# in groups of at most three digits, punctuation runs, newlines, other whitespace.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
NUM_BASE_TOKENS = 128_000
NUM_SPECIAL_TOKENS = 256
# Llama-3.1-Instruct's named special tokens; every other id in 128000..128255 is reserved.
_NAMED_SPECIAL = {
    128000: "<|begin_of_text|>",
    128001: "<|end_of_text|>",
    128004: "<|finetune_right_pad_id|>",
    128006: "<|start_header_id|>",
    128007: "<|end_header_id|>",
    128008: "<|eom_id|>",
    128009: "<|eot_id|>",
    128010: "<|python_tag|>",
}
# The chat template's system block: Llama-3.1-Instruct's defaults (no date given).
KNOWLEDGE_CUTOFF = "December 2023"
TODAY = "26 Jul 2024"


def _special_tokens() -> dict[str, int]:
    out: dict[str, int] = {}
    reserved = 0
    for token_id in range(NUM_BASE_TOKENS, NUM_BASE_TOKENS + NUM_SPECIAL_TOKENS):
        name = _NAMED_SPECIAL.get(token_id)
        if name is None:
            name = f"<|reserved_special_token_{reserved}|>"
            reserved += 1
        out[name] = token_id
    return out


@dataclass(frozen=True)
class Tokenizer:
    """A model's tokenizer and chat template (build with tokenizer_for)."""

    name: str
    encoding: tiktoken.Encoding
    bos_id: int
    eos_ids: tuple[int, ...]

    @property
    def vocab_size(self) -> int:
        return self.encoding.n_vocab

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Token ids of `text`; special-token text (``<|eot_id|>``) becomes its one id, as a
        Hugging Face tokenizer treats added tokens in a prompt."""
        ids = self.encoding.encode(text, allowed_special="all")
        return [self.bos_id, *ids] if add_bos else ids

    def count(self, text: str, *, add_bos: bool = False) -> int:
        return len(self.encode(text, add_bos=add_bos))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids` (bytes that do not form UTF-8 become U+FFFD)."""
        return self.encoding.decode(list(ids), errors="replace")

    def token_text(self, token_id: int) -> str:
        """One token's text, as vLLM shows it in logprobs (a partial UTF-8 sequence decodes
        with U+FFFD)."""
        return self.encoding.decode_single_token_bytes(token_id).decode("utf-8", "replace")

    def is_valid_id(self, token_id: int) -> bool:
        return 0 <= token_id < self.vocab_size

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt Llama-3.1-Instruct's chat template renders (tools in the first user
        message, the template's default). `content` is a string or None; an assistant message
        with `tool_calls` renders them as the template does; "tool"/"ipython" messages render
        under the ipython header."""
        return render_llama3_chat(
            messages, tools=tools, add_generation_prompt=add_generation_prompt
        )


def _header(role: str) -> str:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def render_llama3_chat(
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """Llama-3.1-Instruct's chat template (see Tokenizer.render_chat)."""
    rest = list(messages)
    system = ""
    if rest and rest[0].get("role") == "system":
        system = _text(rest[0].get("content")).strip()
        rest = rest[1:]
    out = ["<|begin_of_text|>", _header("system")]
    if tools is not None:
        out.append("Environment: ipython\n")
    out.append(f"Cutting Knowledge Date: {KNOWLEDGE_CUTOFF}\nToday Date: {TODAY}\n\n")
    out.append(system + "<|eot_id|>")
    if tools is not None:
        if not rest:
            raise BadInputError(
                "Cannot put tools in the first user message when there's no first user message!"
            )
        first = _text(rest[0].get("content")).strip()
        rest = rest[1:]
        out.append(_header("user"))
        out.append(
            "Given the following functions, please respond with a JSON for a function call "
            "with its proper arguments that best answers the given prompt.\n\n"
            'Respond in the format {"name": function name, "parameters": dictionary of '
            "argument name and its value}.Do not use variables.\n\n"
        )
        for tool in tools:
            out.append(json.dumps(tool, indent=4, ensure_ascii=False) + "\n\n")
        out.append(first + "<|eot_id|>")
    for message in rest:
        role = str(message.get("role"))
        calls = message.get("tool_calls")
        if role in ("tool", "ipython"):
            out.append(_header("ipython") + _text(message.get("content")) + "<|eot_id|>")
        elif calls:
            out.append(_header("assistant"))
            for call in calls:
                fn = call.get("function", call)
                args = fn.get("arguments")
                if isinstance(args, str):
                    with contextlib.suppress(json.JSONDecodeError):  # rendered as given
                        args = json.loads(args)
                out.append(
                    f'{{"name": "{fn.get("name")}", "parameters": '
                    f"{json.dumps(args, ensure_ascii=False)}}}"
                )
            out.append("<|eot_id|>")
        else:
            out.append(_header(role) + _text(message.get("content")).strip() + "<|eot_id|>")
    if add_generation_prompt:
        out.append(_header("assistant"))
    return "".join(out)


@cache
def llama3_tokenizer() -> Tokenizer:
    """Llama-3's tokenizer from the shipped vocabulary (loaded once per process)."""
    path = resources.files("models") / "data" / "tokenizers" / "llama3" / "tokenizer.model"
    with resources.as_file(path) as local:
        ranks = load_tiktoken_bpe(str(local), expected_hash=LLAMA3_SHA256)
    if len(ranks) != NUM_BASE_TOKENS:
        raise ValueError(f"{local}: expected {NUM_BASE_TOKENS} ranks, found {len(ranks)}")
    encoding = tiktoken.Encoding(
        "llama3",
        pat_str=LLAMA3_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=_special_tokens(),
    )
    return Tokenizer("llama3", encoding, bos_id=128000, eos_ids=(128001, 128008, 128009))


def tokenizer_for(model: str) -> Tokenizer:
    """The tokenizer of a catalog model (its name, an alias or its Hugging Face id). Every
    catalog model is Llama-3.x today; BadInputError for an unknown model or another family."""
    entry = get_model(model)
    if not entry.name.lower().startswith("llama-3"):
        raise BadInputError(f"no tokenizer ships for model {entry.name!r} (only Llama-3.x)")
    return llama3_tokenizer()
