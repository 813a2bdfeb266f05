"""Requests to the stand-in vLLM server's completions and chat APIs: validation with vLLM's
rules, in vLLM's order, and the choices a request asks for, each with its generation plan
(inferledger/sim_outputs.py). Prompts are tokenised in inferledger/sim_prompts.py, errors
written and fields read in inferledger/sim_errors.py. Pure functions; no I/O.

Sources (github.com/vllm-project/vllm): the request models and their validators
(check_tool_usage, check_logprobs, validate_stream_options, validate_response_format,
validate_prompt_and_prompt_embeds) in vllm/entrypoints/openai/chat_completion/protocol.py and
completion/protocol.py; SamplingParams._verify_args in vllm/sampling_params.py; the engine's
--max-logprobs check; serving_chat's "auto" tool-choice check; serving_completion's batched
prompts. docs/sim-server.md documents the rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from inferledger.core.errors import InferLedgerError
from inferledger.sim_errors import (
    ApiError,
    bool_field,
    check_model,
    field_error,
    float_field,
    int_field,
    int_list_field,
    model_field,
    object_body,
    stop_field,
    validator_error,
    vllm_error,
)
from inferledger.sim_outputs import MAX_LOGPROBS, Ending, Plan, plan_choice, seed_of, stub_json
from inferledger.sim_prompts import Prompt, chat_completion_prompt, completion_prompts
from models.serving.request import Segment
from models.tokenizer import Tokenizer, llama3_tokenizer, tokenizer_for

#: vLLM's CompletionRequest.max_tokens default; a chat request without max_tokens may use
#: the whole context (max_model_len - prompt tokens), as vLLM's get_max_tokens allows.
DEFAULT_MAX_TOKENS = 16
_INT64 = 2**63


# --- requests ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiLimits:
    """What request validation needs to know about the deployment. `tokenizer`: the served
    model's (None: the tokenizer of the first served name the catalog knows, else Llama-3's)."""

    model_names: tuple[str, ...]
    max_model_len: int
    block_size: int
    tokenizer: Tokenizer | None = None

    @property
    def tok(self) -> Tokenizer:
        if self.tokenizer is not None:
            return self.tokenizer
        return _tokenizer_of(self.model_names)


_TOKENIZERS: dict[tuple[str, ...], Tokenizer] = {}


def _tokenizer_of(names: tuple[str, ...]) -> Tokenizer:
    tok = _TOKENIZERS.get(names)
    if tok is None:
        tok = llama3_tokenizer()
        for name in names:
            try:
                tok = tokenizer_for(name)
                break
            except InferLedgerError:
                continue
        _TOKENIZERS[names] = tok
    return tok


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A validated completion or chat request. `prompt`, `prompt_tokens` and `max_tokens` are
    the first prompt's (a batch on /v1/completions has several `prompts`)."""

    chat: bool
    model: str  # the name responses report: the first served name, as vLLM's model_name()
    prompt: tuple[Segment, ...]
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    params: dict[str, Any]  # sampling parameters the span reports (vLLM's do_tracing)
    prompts: tuple[Prompt, ...] = ()
    n: int = 1
    ending: Ending = field(default_factory=Ending)
    seed: int | None = None
    logprobs: int | None = None  # alternatives per token (None: no logprobs)
    echo: bool = False
    tool_name: str | None = None  # the function a named (or "required") tool choice calls
    tool_required: bool = False
    fixed: str | None = None  # the structured output (JSON text) every choice generates
    tok: Tokenizer | None = None
    # plan_choices' answers by request id (a request's view, writer and response share them)
    plans: dict[str, list[Choice]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def tokenizer(self) -> Tokenizer:
        return self.tok or llama3_tokenizer()


def parse_request(body: Any, limits: ApiLimits, *, chat: bool) -> ParsedRequest:
    """Validate a decoded JSON body as vLLM's OpenAI server does, in its order (the request
    model, the model name, the tool choice, the prompt and its length, the sampling
    parameters, the engine's logprobs limit); ApiError if it is not valid."""
    body = object_body(body)
    tok = limits.tok
    # -- the request model: types and validators ------------------------------------------
    model_field(body)
    stream = bool_field(body, "stream")
    options = body.get("stream_options")
    if options and not stream:
        raise validator_error(
            body, "Stream options can only be defined when `stream=True`.", "stream_options"
        )
    if options is not None and not isinstance(options, dict):
        raise field_error(
            "model_type", ("stream_options",), "Input should be a valid dictionary", options
        )
    options = options or {}
    n = int_field(body, "n")
    n = 1 if n is None else n
    max_tokens = int_field(body, "max_tokens")
    name = "max_tokens"
    if chat:
        mct = int_field(body, "max_completion_tokens")
        if mct is not None:
            max_tokens, name = mct, "max_completion_tokens"
    min_tokens = int_field(body, "min_tokens") or 0
    seed = int_field(body, "seed")
    if seed is not None and not -_INT64 <= seed < _INT64:
        low = seed < 0
        raise field_error(
            "greater_than_equal" if low else "less_than_equal",
            ("seed",),
            f"Input should be {'greater' if low else 'less'} than or equal to "
            f"{-_INT64 if low else _INT64 - 1}",
            seed,
        )
    temperature = float_field(body, "temperature")
    top_p = float_field(body, "top_p")
    top_k = int_field(body, "top_k")
    min_p = float_field(body, "min_p")
    presence = float_field(body, "presence_penalty")
    frequency = float_field(body, "frequency_penalty")
    repetition = float_field(body, "repetition_penalty")
    stop = stop_field(body)
    stop_token_ids = int_list_field(body, "stop_token_ids")
    ignore_eos = bool_field(body, "ignore_eos")
    include_stop = bool_field(body, "include_stop_str_in_output")
    fixed = _response_format(body)
    logprobs: int | None
    echo = False
    tool_name: str | None = None
    tool_required = False
    if chat:
        raw_top = body.get("top_logprobs")
        if raw_top is not None and (
            isinstance(raw_top, bool) or not isinstance(raw_top, (int, float))
        ):
            raise validator_error(
                body, "`top_logprobs` must be an integer.", "top_logprobs", raw_top
            )
        want = bool_field(body, "logprobs")
        top = int_field(body, "top_logprobs")
        if top is not None:
            if top < 0 and top != -1:
                raise validator_error(
                    body, "`top_logprobs` must be a positive value or -1.", "top_logprobs", top
                )
            if (top == -1 or top > 0) and not want:
                raise validator_error(
                    body,
                    "when using `top_logprobs`, `logprobs` must be set to true.",
                    "top_logprobs",
                )
        logprobs = (top or 0) if want else None
        tool_name, tool_required = _tool_choice(body)
    else:
        raw_lp = body.get("logprobs")
        if raw_lp is not None and (
            isinstance(raw_lp, bool) or not isinstance(raw_lp, (int, float))
        ):
            raise validator_error(body, "`logprobs` must be an integer.", "logprobs", raw_lp)
        logprobs = int_field(body, "logprobs")
        if logprobs is not None and logprobs < 0 and logprobs != -1:
            raise validator_error(
                body, "`logprobs` must be a positive value or -1.", "logprobs", logprobs
            )
        echo = bool_field(body, "echo")
    # -- the model ---------------------------------------------------------------------------
    check_model(body, limits.model_names)
    # -- serving_chat: tool choice "auto" needs --enable-auto-tool-choice --------------------
    auto = body.get("tool_choice") == "auto" or ("tool_choice" not in body and body.get("tools"))
    if chat and auto:
        raise ApiError(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        )
    # -- the prompt(s) -----------------------------------------------------------------------
    if chat:
        prompts = (chat_completion_prompt(body, tok, limits.block_size),)
    else:
        prompts = completion_prompts(body, tok, limits.block_size)
    limit = limits.max_model_len
    for p in prompts:
        count = len(p.ids)
        if count > limit:
            raise ApiError(
                f"This model's maximum context length is {limit} tokens. However, your request "
                f"has {count} input tokens. Please reduce the length of the input messages.",
                param="messages" if chat else "prompt",
            )
    first = len(prompts[0].ids)
    if max_tokens is None:
        max_tokens = limit - max(len(p.ids) for p in prompts) if chat else DEFAULT_MAX_TOKENS
    elif max_tokens >= 1:
        for p in prompts:
            count = len(p.ids)
            if max_tokens > limit - count:
                raise ApiError(
                    f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                    f"model's maximum context length is {limit} tokens and your request has "
                    f"{count} input tokens ({max_tokens} > {limit} - {count}).",
                    param=name,
                )
    # -- SamplingParams._verify_args ---------------------------------------------------------
    _verify_sampling(
        n=n,
        presence=presence,
        frequency=frequency,
        repetition=repetition,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        logprobs=logprobs,
    )
    # -- the engine's input processor: --max-logprobs -----------------------------------------
    if logprobs is not None:
        wanted = tok.vocab_size if logprobs == -1 else logprobs
        if wanted > MAX_LOGPROBS:
            raise vllm_error(
                f"Requested sample logprobs of {wanted}, which is greater than max allowed: "
                f"{MAX_LOGPROBS}",
                param="logprobs",
                value=wanted,
            )
    params = {
        "max_tokens": max_tokens,
        # vLLM's defaults when the request leaves them out; its span skips falsy values.
        "temperature": 1.0 if temperature is None else temperature,
        "top_p": 1.0 if top_p is None else top_p,
        "n": n,
    }
    if tool_name is not None:
        fixed = stub_json(_tool_parameters(body, tool_name))
    return ParsedRequest(
        chat=chat,
        model=limits.model_names[0],
        prompt=prompts[0].segments,
        prompt_tokens=first,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        continuous_usage=bool(options.get("include_usage"))
        and bool(options.get("continuous_usage_stats")),
        params=params,
        prompts=prompts,
        n=n,
        ending=Ending(
            ignore_eos=ignore_eos,
            min_tokens=min_tokens,
            stop=stop,
            stop_token_ids=stop_token_ids,
            include_stop_str_in_output=include_stop,
            chat=chat,
        ),
        seed=seed,
        logprobs=None if logprobs is None else max(0, logprobs),
        echo=echo,
        tool_name=tool_name,
        tool_required=tool_required,
        fixed=fixed,
        tok=tok,
    )


def _verify_sampling(
    *,
    n: int,
    presence: float | None,
    frequency: float | None,
    repetition: float | None,
    temperature: float | None,
    top_p: float | None,
    top_k: int | None,
    min_p: float | None,
    max_tokens: int,
    min_tokens: int,
    logprobs: int | None,
) -> None:
    """SamplingParams._verify_args (vllm/sampling_params.py), in its order, with its
    messages; the defaults are those from_optional fills in."""
    if n < 1:
        raise vllm_error(f"n must be at least 1, got {n}.")
    if presence is not None and not -2.0 <= presence <= 2.0:
        raise vllm_error(f"presence_penalty must be in [-2, 2], got {presence}.")
    if frequency is not None and not -2.0 <= frequency <= 2.0:
        raise vllm_error(f"frequency_penalty must be in [-2, 2], got {frequency}.")
    if repetition is not None:
        if not math.isfinite(repetition):
            raise vllm_error(f"repetition_penalty must be a finite number, got {repetition}.")
        if repetition <= 0.0:
            raise vllm_error(f"repetition_penalty must be greater than zero, got {repetition}.")
    t = 1.0 if temperature is None else temperature
    if not math.isfinite(t):
        raise vllm_error(
            f"temperature must be a finite number, got {t}.", param="temperature", value=t
        )
    if t < 0.0:
        raise vllm_error(
            f"temperature must be non-negative, got {t}.", param="temperature", value=t
        )
    if t > 2.0:
        raise vllm_error(f"temperature must be in [0, 2], got {t}.", param="temperature", value=t)
    p = 1.0 if top_p is None else top_p
    if not 0.0 < p <= 1.0:
        raise vllm_error(f"top_p must be in (0, 1], got {p}.", param="top_p", value=p)
    if top_k is not None and top_k < -1:
        raise vllm_error(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        raise vllm_error(f"min_p must be in [0, 1], got {min_p}.")
    if max_tokens < 1:
        # vLLM names the parameter "max_tokens" whichever field the request used
        raise vllm_error(
            f"max_tokens must be at least 1, got {max_tokens}.",
            param="max_tokens",
            value=max_tokens,
        )
    if min_tokens < 0:
        raise vllm_error(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if min_tokens > max_tokens:
        raise vllm_error(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."
        )
    if logprobs is not None and logprobs != -1 and logprobs < 0:
        raise vllm_error(
            f"logprobs must be non-negative or -1, got {logprobs}.",
            param="logprobs",
            value=logprobs,
        )
    if t < 1e-5 and n > 1:
        raise vllm_error(f"n must be 1 when using greedy sampling, got {n}.")


def _response_format(body: Mapping[str, Any]) -> str | None:
    """The JSON a response_format asks for: json_schema → a stub of its schema, json_object →
    an empty object; text (or none) → None."""
    rf = body.get("response_format")
    if rf is None:
        return None
    if not isinstance(rf, dict) or rf.get("type") not in (
        "text",
        "json_object",
        "json_schema",
        "structural_tag",
    ):
        raise field_error(
            "union_tag_invalid",
            ("response_format",),
            "Input tag does not match any of the expected tags: 'text', 'json_object', "
            "'json_schema', 'structural_tag'",
            rf,
        )
    if rf["type"] == "json_schema":
        spec = rf.get("json_schema")
        if spec is None:
            raise validator_error(
                body,
                "When response_format type is 'json_schema', the 'json_schema' field must be "
                "provided.",
                "response_format",
            )
        schema = spec.get("schema", {}) if isinstance(spec, dict) else {}
        return stub_json(schema)
    if rf["type"] == "json_object":
        return "{}"
    return None


def _tool_choice(body: Mapping[str, Any]) -> tuple[str | None, bool]:
    """check_tool_usage (the chat request model's validator): (the function a named or
    "required" tool choice calls, whether it is "required")."""
    tools = body.get("tools")
    if tools == []:
        raise validator_error(
            body,
            "`tools` must not be an empty array. Either provide at least one tool or omit the "
            "field entirely.",
            "tools",
        )
    if tools is not None and (
        not isinstance(tools, list)
        or not all(
            isinstance(t, dict)
            and isinstance(t.get("function"), dict)
            and isinstance(t["function"].get("name"), str)
            for t in tools
        )
    ):
        raise field_error("model_type", ("tools",), "Input should be a valid list", tools)
    choice = body.get("tool_choice")
    if "tool_choice" not in body and tools:
        choice = "auto"
    if choice is None or choice == "none":
        return None, False
    if tools is None:
        raise validator_error(body, "When using `tool_choice`, `tools` must be set.", "tool_choice")
    if choice not in ("auto", "required") and not isinstance(choice, dict):
        raise validator_error(
            body,
            f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" '
            'or "required" are supported.',
            "tool_choice",
        )
    if choice == "auto":
        return None, False  # rejected after the model check, as serving_chat does
    if choice == "required":
        return tools[0]["function"]["name"], True
    usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
    function = choice.get("function")
    if not isinstance(function, dict):
        raise validator_error(
            body,
            f"Invalid value for `function`: `{function}` in `tool_choice`! {usage}",
            "tool_choice.function",
        )
    if "name" not in function:
        raise validator_error(
            body,
            f"Expected field `name` in `function` in `tool_choice`! {usage}",
            "tool_choice.function.name",
        )
    fname = function["name"]
    if not isinstance(fname, str) or not fname:
        raise validator_error(
            body,
            f"Invalid `name` in `function`: `{fname}` in `tool_choice`! {usage}",
            "tool_choice.function.name",
        )
    if not any(t["function"]["name"] == fname for t in tools):
        raise validator_error(
            body,
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            "tool_choice",
        )
    return fname, False


def _tool_parameters(body: Mapping[str, Any], name: str) -> Any:
    for t in body.get("tools") or ():
        if t["function"]["name"] == name:
            return t["function"].get("parameters") or {"type": "object", "properties": {}}
    return {}


# --- choices ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Choice:
    """One choice of a response: its index (prompt index x n + sample index, as
    serving_completion numbers a batch), its prompt, its seed and its plan."""

    index: int
    prompt: Prompt
    seed: int
    plan: Plan


def plan_choices(parsed: ParsedRequest, request_id: str) -> list[Choice]:
    """Every choice of a request (n per prompt), deterministic given the request id (or the
    request's seed)."""
    cached = parsed.plans.get(request_id)
    if cached is not None:
        return cached
    tok = parsed.tokenizer
    prompts = parsed.prompts or (Prompt((), "", parsed.prompt),)
    out: list[Choice] = []
    for p_index, prompt in enumerate(prompts):
        for s in range(parsed.n):
            index = p_index * parsed.n + s
            seed = seed_of(parsed.seed, request_id, index)
            plan = plan_choice(tok, parsed.ending, seed, parsed.max_tokens, parsed.fixed)
            out.append(Choice(index, prompt, seed, plan))
    parsed.plans[request_id] = out
    return out


def child_request_id(request_id: str, choice: Choice, count: int) -> str:
    """The engine request id of a choice: the request's own when it has one choice, else
    vLLM's child ids ("{index}_{request_id}")."""
    return request_id if count == 1 else f"{choice.index}_{request_id}"
