"""What the stand-in vLLM server "generates": the token ids of each choice and how the choice
ends (EOS drawn from an output-length distribution, a stop string, a stop token id, max_tokens),
deterministic logprobs, and JSON stubs shaped by a JSON schema (tool-call arguments,
response_format). Pure functions; no I/O. docs/sim-server.md ("Tokens") documents the rules.

The text is filler: common English words that are one Llama-3 token each (with their leading
space), so the text a client re-tokenizes has exactly the completion tokens reported.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.tokenizer import Tokenizer
from models.workload.distributions import LogNormal

FILLER_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there one all we their has been if more when will "
    "would who so no"
)
FILLER = tuple(" " + w for w in FILLER_WORDS.split())

#: Output length (tokens, EOS included) of a request that does not set ignore_eos: the chat
#: answers of the workload model's support assistant (models/data/workload.yaml,
#: support-assistant's `output_tokens`: lognormal, median 220, sigma 0.5, 20..1024), capped by
#: the request's max_tokens.
OUTPUT_LENGTH = LogNormal(median=220.0, sigma=0.5, low=20.0, high=1024.0)

#: vLLM's default --max-logprobs.
MAX_LOGPROBS = 20

_EOS_CHAT = 128009  # <|eot_id|>: where Llama-3.1-Instruct ends a turn
_EOS_TEXT = 128001  # <|end_of_text|>
_ALTERNATES = 64  # size of the pool top_logprobs alternatives are drawn from


def filler_text(start: int, stop: int) -> str:
    """The generated text of output tokens start..stop-1 (deterministic)."""
    n = len(FILLER)
    return "".join(FILLER[i % n] for i in range(start, stop))


def filler_ids(tok: Tokenizer, count: int) -> list[int]:
    """The token ids of the first `count` filler tokens."""
    ids = _filler_ids(tok)
    return [ids[i % len(ids)] for i in range(count)]


_FILLER_IDS: dict[str, tuple[int, ...]] = {}


def _filler_ids(tok: Tokenizer) -> tuple[int, ...]:
    ids = _FILLER_IDS.get(tok.name)
    if ids is None:
        ids = tuple(tok.encode(w)[0] for w in FILLER)
        _FILLER_IDS[tok.name] = ids
    return ids


def seed_of(seed: int | None, request_id: str, index: int) -> int:
    """The random seed of one choice: the request's `seed` when given (so equal requests with a
    seed give equal outputs, as vLLM's seeded sampling does), else the request id."""
    key = f"{seed}" if seed is not None else request_id
    digest = hashlib.blake2b(f"{key}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def draw_length(seed: int) -> int:
    """Output tokens, EOS included, of an answer that ends by itself."""
    rng = np.random.default_rng(seed)
    return max(1, round(float(OUTPUT_LENGTH.sample(rng, 1)[0])))


@dataclass(frozen=True, slots=True)
class Plan:
    """One choice's generation as the engine will run it to its natural end: `ids` (every
    output token, terminator included), `text_end` (characters of decode(ids) the client sees)
    and `stop_reason` (the stop string or stop token id that ended it, vLLM's `stop_reason`).
    A request the engine cuts shorter (max_tokens, an abort) shows a prefix of it."""

    ids: tuple[int, ...]
    text_end: int
    stop_reason: str | int | None

    @property
    def length(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class Ending:
    """How a choice may end, from the request's sampling parameters."""

    ignore_eos: bool = False
    min_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    chat: bool = True


def plan_choice(
    tok: Tokenizer, ending: Ending, seed: int, max_tokens: int, fixed: str | None = None
) -> Plan:
    """The plan of one choice. `fixed`: the whole answer (a structured output: JSON), then EOS.
    Otherwise filler until the drawn length, which ends with EOS, or, when the request has
    them, with its first stop string or stop token id in their place (the "model" emits the
    stop where it would have ended its answer). A stop string that the filler happens to
    contain earlier stops it there, as vLLM's stop checker would. min_tokens holds every end
    back, as vLLM does; max_tokens cuts the plan (finish_reason "length")."""
    eos = _EOS_CHAT if ending.chat else _EOS_TEXT
    if fixed is not None:
        ids = [*tok.encode(fixed), eos]
        return _cut(tok, Plan(tuple(ids), len(fixed), None), max_tokens)
    if ending.ignore_eos and not ending.stop:
        ids = filler_ids(tok, max_tokens)
        return Plan(tuple(ids), len(tok.decode(ids)), None)
    length = max(draw_length(seed), ending.min_tokens + 1)
    # max_tokens comes first: a plan as long as max_tokens is cut there, with no terminator
    # (vLLM's check_stop tests the length before EOS), and so is one that ignores EOS, which
    # only a stop string the filler contains can end
    cut = ending.ignore_eos or length >= max_tokens
    length = min(length, max_tokens) if not ending.ignore_eos else max_tokens
    tail: list[int]
    if cut:
        tail = []
    elif ending.stop:
        tail = tok.encode(ending.stop[0])
    elif ending.stop_token_ids:
        tail = [ending.stop_token_ids[0]]
    else:
        tail = [eos]
    body = filler_ids(tok, max(0, length - len(tail)))
    ids = body + tail
    text = tok.decode(ids)
    if ending.stop:
        hit = _first_stop(text, ending.stop, tok, ids, ending.min_tokens)
        if hit is not None:
            end_token, start, stop = hit
            shown = start + (len(stop) if ending.include_stop_str_in_output else 0)
            return _cut(tok, Plan(tuple(ids[:end_token]), shown, stop), max_tokens)
    if tail and tail[0] in ending.stop_token_ids:
        special = tail[0] >= tok.bos_id  # special tokens are skipped in the text
        shown = len(tok.decode(body)) if special else len(text)
        return _cut(tok, Plan(tuple(ids), shown, tail[0]), max_tokens)
    if tail == [eos]:
        return _cut(tok, Plan(tuple(ids), len(tok.decode(body)), None), max_tokens)
    return _cut(tok, Plan(tuple(ids), len(text), None), max_tokens)


def _first_stop(
    text: str, stops: Sequence[str], tok: Tokenizer, ids: Sequence[int], min_tokens: int
) -> tuple[int, int, str] | None:
    """The earliest stop string in `text` that completes after min_tokens tokens: (tokens up
    to the one completing it, its start in characters, the string)."""
    best: tuple[int, int, str] | None = None
    for s in stops:
        start = text.find(s)
        while start >= 0:
            end_token = _token_covering(tok, ids, start + len(s))
            if end_token >= min_tokens:
                if best is None or start < best[1]:
                    best = (end_token, start, s)
                break
            start = text.find(s, start + 1)
    return best


def _token_covering(tok: Tokenizer, ids: Sequence[int], chars: int) -> int:
    """How many tokens it takes for the decoded text to reach `chars` characters."""
    n = 0
    for i in range(len(ids)):
        n += len(tok.decode([ids[i]]))
        if n >= chars:
            return i + 1
    return len(ids)


def _cut(tok: Tokenizer, plan: Plan, max_tokens: int) -> Plan:
    if plan.length <= max_tokens:
        return plan
    ids = plan.ids[:max_tokens]
    return Plan(ids, min(plan.text_end, len(tok.decode(ids))), None)


def shown_text(tok: Tokenizer, plan: Plan, start: int, stop: int, head: int | None = None) -> str:
    """The text the client sees of output tokens start..stop-1 (all generated text is ASCII, so
    token texts concatenate). `head`: the characters of tokens 0..start-1, when the caller
    keeps count (a stream)."""
    if stop <= start:
        return ""
    if head is None:
        head = len(tok.decode(plan.ids[:start])) if start else 0
    piece = tok.decode(plan.ids[start:stop])
    return piece[: max(0, plan.text_end - head)]


# --- logprobs --------------------------------------------------------------------------------


def step_logprobs(tok: Tokenizer, token_id: int, position: int, seed: int, k: int) -> list:
    """One step's logprobs as vLLM's engine returns them: the sampled token first, then the
    k most likely alternatives (the sampled one once), as (token_id, logprob) pairs. Values
    are deterministic and plausible: the sampled token between -2.5 and -0.001, the
    alternatives below 1 - p(sampled) in total."""
    h = hashlib.blake2b(f"{seed}/{position}/{token_id}".encode(), digest_size=8).digest()
    u = int.from_bytes(h, "big") / 2**64
    lp = -0.001 - 2.5 * u**3
    out = [(token_id, lp)]
    rest = 1.0 - math.exp(lp)
    pool = _filler_ids(tok)
    j = int.from_bytes(h[:2], "big")
    for i in range(k):
        alt = pool[(j + i) % len(pool)]
        if alt == token_id:
            alt = pool[(j + i + _ALTERNATES) % len(pool)] if len(pool) > 1 else alt
        share = rest * 0.5 ** (i + 1)
        out.append((alt, math.log(max(share, 1e-300))))
    # dedupe, keep order
    seen: set[int] = set()
    pairs = []
    for t, v in out:
        if t not in seen:
            seen.add(t)
            pairs.append((t, max(v, -9999.0)))
    return pairs


# --- JSON stubs -------------------------------------------------------------------------------


def schema_stub(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """A small value that validates against a JSON schema: every property of an object (its
    `required` ones and the rest), the first `enum`/`const`/`examples` value, a `$ref`
    resolved inside the schema, the first branch of anyOf/oneOf, allOf merged, minimums and
    minItems/minLength honoured."""
    root = schema if root is None else root
    if not isinstance(schema, Mapping) or depth > 12:
        return {}
    if "$ref" in schema and isinstance(schema["$ref"], str):
        return schema_stub(_resolve(root, schema["$ref"]), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if isinstance(schema.get("default"), (str, int, float, bool)):
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            non_null = [
                b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")
            ]
            return schema_stub((non_null or branches)[0], root, depth + 1)
    if isinstance(schema.get("allOf"), list):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            if isinstance(part, Mapping):
                merged.update(part)
        return schema_stub(merged, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((t for t in kind if t != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties")
        out: dict[str, Any] = {}
        if isinstance(props, Mapping):
            for name, sub in props.items():
                out[str(name)] = schema_stub(sub, root, depth + 1)
        return out
    if kind == "array":
        count = schema.get("minItems", 1)
        count = count if isinstance(count, int) and 0 < count <= 8 else 1
        return [schema_stub(schema.get("items", {}), root, depth + 1) for _ in range(count)]
    if kind == "integer":
        return int(_number_in(schema, 1))
    if kind == "number":
        return float(_number_in(schema, 1.5))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string_in(schema)


def _resolve(root: Any, ref: str) -> Any:
    if not ref.startswith("#"):
        return {}
    node = root
    for part in ref.lstrip("#").strip("/").split("/"):
        if not part:
            continue
        if not isinstance(node, Mapping) or part not in node:
            return {}
        node = node[part]
    return node


def _number_in(schema: Mapping[str, Any], default: float) -> float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    value = default
    if isinstance(low, (int, float)) and not isinstance(low, bool):
        value = max(value, low + (1 if "exclusiveMinimum" in schema else 0))
    if isinstance(high, (int, float)) and not isinstance(high, bool):
        value = min(value, high - (1 if "exclusiveMaximum" in schema else 0))
    return value


_FORMATS = {
    "date": "2024-07-26",
    "date-time": "2024-07-26T12:00:00Z",
    "time": "12:00:00",
    "email": "user@example.com",
    "uri": "https://example.com",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def _string_in(schema: Mapping[str, Any]) -> str:
    fmt = schema.get("format")
    text = _FORMATS.get(fmt, "the") if isinstance(fmt, str) else "the"
    low = schema.get("minLength")
    if isinstance(low, int) and len(text) < low:
        text = text + "x" * (low - len(text))
    high = schema.get("maxLength")
    if isinstance(high, int) and 0 <= high < len(text):
        text = text[:high]
    return text


def stub_json(schema: Any) -> str:
    """schema_stub as JSON text (compact separators but a space after them, as models write)."""
    return json.dumps(schema_stub(schema), ensure_ascii=False)
