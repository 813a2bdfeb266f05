"""The stand-in vLLM server driven by the real OpenAI Python SDK: every request shape a client
sends to vLLM, and the response fields vLLM's protocol models define.

Shapes are vLLM's (github.com/vllm-project/vllm): ChatCompletionResponse, ChatMessage,
ChatCompletionLogProbs, ChatCompletionStreamResponse in
vllm/entrypoints/openai/chat_completion/protocol.py; CompletionResponse, CompletionLogProbs,
CompletionStreamResponse in vllm/entrypoints/openai/completion/protocol.py; UsageInfo and
ErrorResponse in vllm/entrypoints/openai/engine/protocol.py; messages from
SamplingParams._verify_args (vllm/sampling_params.py), the request validators and
serving_chat's tool-choice check. A real SimServer on loopback (speed 100, one replica); nothing
of ours is mocked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import openai
import pytest
import requests

from inferledger.sim_errors import (
    FieldError,
    lax_bool,
    lax_float,
    lax_int,
    validation_error,
    validator_error,
)
from inferledger.sim_outputs import (
    FILLER,
    OUTPUT_LENGTH,
    Ending,
    plan_choice,
    schema_stub,
    shown_text,
)
from inferledger.sim_server import SimServeOptions, SimServer
from models.serving import CacheConfig, ClusterConfig, ReplicaConfig, RouterPolicy, SchedulerConfig
from models.steptime import build_predictor
from models.tokenizer import tokenizer_for
from tests.conftest import serving_sim

MODEL = "llama-3.1-8b"
TOK = tokenizer_for(MODEL)
HELLO = [{"role": "user", "content": "Hello!"}]

# the fields each response object has in vLLM's protocol models (the files above)
CHAT_RESPONSE = {"id", "object", "created", "model", "choices", "usage"}
CHAT_CHOICE = {"index", "message", "logprobs", "finish_reason", "stop_reason"}
CHAT_MESSAGE = {"role", "content"}
CHUNK = {"id", "object", "created", "model", "choices"}
CHAT_CHUNK_CHOICE = {"index", "delta", "logprobs", "finish_reason", "stop_reason"}
COMPLETION_CHOICE = {"index", "text", "logprobs", "finish_reason", "stop_reason"}
COMPLETION_LOGPROBS = {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
USAGE = {"prompt_tokens", "completion_tokens", "total_tokens"}


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    predictor = build_predictor(MODEL, "h200")
    cluster = ClusterConfig(
        ReplicaConfig(
            CacheConfig(predictor.num_gpu_blocks()),
            SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=2048, max_model_len=8192),
        ),
        num_replicas=1,
        router=RouterPolicy.LEAST_OUTSTANDING_REQUESTS,
    )
    options = SimServeOptions(
        cluster=cluster,
        predictor=predictor,
        served_model_names=(MODEL, "alias"),
        port=0,
        dcgm_port=None,
        speed=100.0,
        threads=16,
        drain_timeout_s=1.0,
    )
    with serving_sim(options) as (sim, _):
        yield sim


@pytest.fixture(scope="module")
def url(server: SimServer) -> str:
    host, port = server.addresses["router"]
    return f"http://{host}:{port}"


@pytest.fixture(scope="module")
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=30)


def _raw(resp: Any) -> dict[str, Any]:
    return json.loads(resp.http_response.text)


def _valid(value: Any, schema: dict[str, Any]) -> bool:
    """Enough of JSON-schema validation for the schemas these tests send."""
    kind = schema.get("type")
    if "enum" in schema:
        return value in schema["enum"]
    if kind == "object":
        props = schema.get("properties", {})
        return (
            isinstance(value, dict)
            and all(k in value for k in schema.get("required", ()))
            and all(_valid(value[k], props[k]) for k in value if k in props)
        )
    if kind == "array":
        return isinstance(value, list) and all(_valid(v, schema.get("items", {})) for v in value)
    if kind == "integer":
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and value >= schema.get("minimum", value)
        )
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    return True


# -- token counts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "tokens"),
    [
        (HELLO, 37),
        ([{"role": "user", "content": "The quick brown fox jumps over the lazy dog."}], 45),
        (
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the capital of France?"},
            ],
            48,
        ),
    ],
)
def test_chat_prompt_tokens_are_the_llama_template_counts(client, messages, tokens) -> None:
    """Llama-3.1-8B-Instruct's real counts (template + tokenizer, one BOS)."""
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
    assert reply.usage.prompt_tokens == tokens


def test_completion_prompt_tokens_get_one_bos_and_ids_count_as_given(client) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    reply = client.completions.create(model=MODEL, prompt=text, max_tokens=1)
    assert reply.usage.prompt_tokens == len(TOK.encode(text)) + 1 == 11
    ids = client.completions.create(model=MODEL, prompt=[791, 4062, 14198], max_tokens=1)
    assert ids.usage.prompt_tokens == 3


# -- shapes --------------------------------------------------------------------------------------


def test_chat_response_has_vllms_fields_and_text_retokenizes_to_its_tokens(client) -> None:
    resp = client.chat.completions.with_raw_response.create(
        model="alias", messages=HELLO, max_completion_tokens=6
    )
    body = _raw(resp)
    assert set(body) >= CHAT_RESPONSE and body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == MODEL  # vLLM reports its first served name whatever the alias
    (choice,) = body["choices"]
    assert set(choice) >= CHAT_CHOICE and set(choice["message"]) >= CHAT_MESSAGE
    assert "tool_calls" not in choice["message"]  # ChatMessage drops an empty list
    assert choice["finish_reason"] == "length" and choice["stop_reason"] is None
    assert set(body["usage"]) >= USAGE and body["usage"]["completion_tokens"] == 6
    assert len(TOK.encode(choice["message"]["content"])) == 6
    parsed = resp.parse()  # and the SDK reads it
    assert parsed.choices[0].message.role == "assistant"


def test_streamed_chat_with_usage(client) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(FILLER[:5])
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].usage.prompt_tokens == 37
    for c in chunks:
        assert set(c.model_dump()) >= CHUNK and c.object == "chat.completion.chunk"
        for ch in c.choices:
            assert set(ch.model_dump()) >= CHAT_CHUNK_CHOICE


def test_completion_and_its_stream(client) -> None:
    resp = client.completions.with_raw_response.create(model=MODEL, prompt="Say", max_tokens=3)
    body = _raw(resp)
    (choice,) = body["choices"]
    assert set(choice) >= COMPLETION_CHOICE and body["object"] == "text_completion"
    assert choice["text"] == "".join(FILLER[:3])
    stream = client.completions.create(
        model=MODEL, prompt="Say", max_tokens=3, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice["text"]
    assert chunks[-1].usage.total_tokens == 2 + 3


# -- honoured parameters ---------------------------------------------------------------------------


def test_stop_string_cuts_the_text_and_is_the_stop_reason(client) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=50, stop=[" to", " in"]
    )
    choice = reply.choices[0]
    assert choice.message.content == " the of and"
    assert choice.finish_reason == "stop" and choice.model_extra["stop_reason"] == " to"
    assert reply.usage.completion_tokens == 4  # the stop string's token was generated
    kept = client.completions.create(
        model=MODEL,
        prompt="Go",
        max_tokens=50,
        stop=" and",
        extra_body={"include_stop_str_in_output": True},
    )
    assert kept.choices[0].text == " the of and"


def test_streamed_stop_and_logprobs(client) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        max_tokens=50,
        stop=" to",
        stream=True,
        logprobs=True,
        top_logprobs=1,
    )
    chunks = [c for c in stream if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == " the of and"
    last = chunks[-1].choices[0]
    assert last.finish_reason == "stop" and last.model_extra["stop_reason"] == " to"
    tokens = [
        e.token for c in chunks if c.choices[0].logprobs for e in c.choices[0].logprobs.content
    ]
    assert tokens == [" the", " of", " and", " to"]


def test_a_stop_string_ends_the_answer_where_eos_would(client) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=1000, stop=["\n\nUser:"], seed=7
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and choice.model_extra["stop_reason"] == "\n\nUser:"
    assert "User:" not in choice.message.content


def test_eos_ends_answers_at_a_seeded_length(client) -> None:
    first = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2000, seed=1)
    again = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2000, seed=1)
    tokens = first.usage.completion_tokens
    assert (
        first.choices[0].finish_reason == "stop"
        and first.choices[0].model_extra["stop_reason"] is None
    )
    assert OUTPUT_LENGTH.low <= tokens <= OUTPUT_LENGTH.high
    assert again.usage.completion_tokens == tokens
    # the text is every token but the EOS, which the text skips (a special token)
    assert len(TOK.encode(first.choices[0].message.content)) == tokens - 1
    capped = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=10, seed=1)
    assert capped.choices[0].finish_reason == "length" and capped.usage.completion_tokens == 10
    forced = client.completions.create(
        model=MODEL, prompt="x", max_tokens=1500, seed=1, extra_body={"ignore_eos": True}
    )
    assert forced.choices[0].finish_reason == "length"
    assert forced.usage.completion_tokens == 1500


def test_min_tokens_holds_eos_back(client) -> None:
    reply = client.completions.create(
        model=MODEL, prompt="x", max_tokens=1500, seed=1, extra_body={"min_tokens": 1100}
    )
    assert reply.choices[0].finish_reason == "stop" and reply.usage.completion_tokens == 1101


def test_stop_token_ids_are_the_stop_reason(client) -> None:
    reply = client.completions.create(
        model=MODEL, prompt="x", max_tokens=2000, seed=3, extra_body={"stop_token_ids": [13]}
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and choice.model_extra["stop_reason"] == 13
    assert choice.text.endswith(".")  # token 13 is ".", not special: it stays in the text


def test_n_choices_and_batched_prompts(client) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert reply.usage.completion_tokens == 12 and reply.usage.prompt_tokens == 37
    stream = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        max_tokens=4,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts = {0: "", 1: ""}
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
        if chunk.usage:
            assert chunk.usage.completion_tokens == 8
    assert texts == {0: "".join(FILLER[:4]), 1: "".join(FILLER[:4])}
    batch = client.completions.create(model=MODEL, prompt=["one", "two words"], max_tokens=2, n=2)
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert batch.usage.prompt_tokens == 2 + 3 and batch.usage.completion_tokens == 8
    ids = client.completions.create(model=MODEL, prompt=[[1, 2], [3, 4, 5]], max_tokens=1)
    assert len(ids.choices) == 2 and ids.usage.prompt_tokens == 5


def test_chat_logprobs(client) -> None:
    resp = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=HELLO, max_tokens=3, logprobs=True, top_logprobs=2
    )
    content = _raw(resp)["choices"][0]["logprobs"]["content"]
    assert len(content) == 3
    for i, entry in enumerate(content):
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["token"] == FILLER[i] and entry["bytes"] == list(FILLER[i].encode())
        assert entry["logprob"] <= 0 and len(entry["top_logprobs"]) == 2
        assert {"token", "logprob", "bytes"} == set(entry["top_logprobs"][0])
    parsed = resp.parse().choices[0].logprobs.content
    assert parsed[0].token == FILLER[0]
    plain = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2)
    assert plain.choices[0].logprobs is None


def test_completion_logprobs_and_echo(client) -> None:
    reply = client.completions.create(model=MODEL, prompt="Hi", max_tokens=3, logprobs=2)
    lp = reply.choices[0].logprobs
    assert set(lp.model_dump()) >= COMPLETION_LOGPROBS
    assert lp.tokens == list(FILLER[:3]) and len(lp.token_logprobs) == 3
    assert all(len(top) <= 3 for top in lp.top_logprobs)  # the sampled token and the top 2
    assert lp.text_offset == [0, 4, 7]
    echoed = client.completions.create(
        model=MODEL, prompt="Hi", max_tokens=2, echo=True, logprobs=0
    )
    assert echoed.choices[0].text == "Hi" + "".join(FILLER[:2])
    elp = echoed.choices[0].logprobs
    assert elp.tokens[0] == "<|begin_of_text|>" and elp.token_logprobs[0] is None
    assert len(elp.tokens) == 2 + 2  # BOS, "Hi", then two generated


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "minimum": 1},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}


def test_named_tool_choice_returns_schema_shaped_arguments(client) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    choice = reply.choices[0]
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("chatcmpl-tool-")
    args = json.loads(call.function.arguments)
    assert _valid(args, WEATHER["function"]["parameters"])
    assert choice.finish_reason == "stop"  # serving_chat: a named tool choice ends as "stop"
    # the arguments and the EOS are the completion
    assert reply.usage.completion_tokens == len(TOK.encode(call.function.arguments)) + 1
    stream = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True,
    )
    arguments, names = "", []
    for chunk in stream:
        for c in chunk.choices:
            for tc in c.delta.tool_calls or ():
                names += [tc.function.name] if tc.function.name else []
                arguments += tc.function.arguments or ""
    assert names == ["get_weather"] and json.loads(arguments) == args


def test_required_tool_choice_ends_with_tool_calls(client) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=HELLO, tools=[WEATHER], tool_choice="required"
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    assert reply.choices[0].message.tool_calls[0].function.name == "get_weather"


def test_json_schema_response_format(client) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "score": {"type": "number"},
        },
        "required": ["name", "tags"],
    }
    reply = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    )
    assert _valid(json.loads(reply.choices[0].message.content), schema)
    obj = client.chat.completions.create(
        model=MODEL, messages=HELLO, response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(obj.choices[0].message.content), dict)


# -- accepted as vLLM accepts ------------------------------------------------------------------


def test_missing_model_numeric_strings_and_max_completion_tokens(url, client) -> None:
    body = {"messages": HELLO, "max_tokens": "3", "temperature": "0.5", "stream": "false"}
    resp = requests.post(url + "/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.json()["model"] == MODEL and resp.json()["usage"]["completion_tokens"] == 3
    reply = client.chat.completions.create(model=MODEL, messages=HELLO, max_completion_tokens=2)
    assert reply.usage.completion_tokens == 2


# -- rejected as vLLM rejects ------------------------------------------------------------------


def _error(exc: openai.APIStatusError) -> dict[str, Any]:
    return exc.response.json()["error"]


def test_errors_are_vllms(client) -> None:
    with pytest.raises(openai.BadRequestError) as auto:
        client.chat.completions.create(
            model=MODEL, messages=HELLO, tools=[WEATHER], tool_choice="auto"
        )
    assert _error(auto.value)["message"] == (
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    )
    with pytest.raises(openai.BadRequestError) as temp:
        client.chat.completions.create(model=MODEL, messages=HELLO, temperature=-1)
    assert _error(temp.value) == {
        "message": "temperature must be non-negative, got -1.0. (parameter=temperature, "
        "value=-1.0)",
        "type": "BadRequestError",
        "param": "temperature",
        "code": 400,
    }
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-5", messages=HELLO)
    assert _error(missing.value)["message"] == "The model `gpt-5` does not exist."
    with pytest.raises(openai.BadRequestError) as too_many:
        client.chat.completions.create(model=MODEL, messages=HELLO, logprobs=True, top_logprobs=21)
    assert _error(too_many.value)["param"] == "logprobs"
    with pytest.raises(openai.BadRequestError) as top_p:
        client.completions.create(model=MODEL, prompt="x", top_p=1.5)
    assert _error(top_p.value)["message"].startswith("top_p must be in (0, 1], got 1.5.")
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(
            model=MODEL,
            messages=HELLO,
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    assert "does not match any of the specified `tools`" in _error(unknown.value)["message"]
    assert _error(unknown.value)["type"] == "Bad Request"


# -- the generation plan (inferledger/sim_outputs.py) -------------------------------------------


def test_a_stop_string_inside_the_filler_stops_there() -> None:
    ending = Ending(stop=(" is",), chat=False)
    plan = plan_choice(TOK, ending, seed=5, max_tokens=500)
    assert plan.stop_reason == " is" and plan.length == 7  # " the of and to in a is"
    assert shown_text(TOK, plan, 0, plan.length) == "".join(FILLER[:6])
    kept = plan_choice(TOK, replace(ending, include_stop_str_in_output=True), 5, 500)
    assert shown_text(TOK, kept, 0, kept.length) == "".join(FILLER[:7])


def test_a_special_stop_token_counts_but_shows_no_text() -> None:
    plan = plan_choice(TOK, Ending(stop_token_ids=(128009,)), seed=5, max_tokens=5000)
    assert plan.stop_reason == 128009 and plan.ids[-1] == 128009
    text = shown_text(TOK, plan, 0, plan.length)
    assert len(TOK.encode(text)) == plan.length - 1


def test_the_plan_is_cut_at_max_tokens_without_a_terminator() -> None:
    seed = 11
    natural = plan_choice(TOK, Ending(), seed, 5000)
    at = plan_choice(TOK, Ending(), seed, natural.length)  # EOS would be the last token
    assert at.length == natural.length and at.ids[-1] != 128009 and at.stop_reason is None
    assert len(TOK.encode(shown_text(TOK, at, 0, at.length))) == at.length


def test_schema_stubs_validate() -> None:
    schema = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date"},
            "count": {"type": "integer", "minimum": 4, "maximum": 9},
            "kind": {"$ref": "#/$defs/kind"},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "number"}]},
            "items": {"type": "array", "items": {"type": "boolean"}, "minItems": 2},
        },
        "required": ["when", "count", "kind"],
        "$defs": {"kind": {"type": "string", "enum": ["a", "b"]}},
    }
    value = schema_stub(schema)
    assert value == {
        "when": "2024-07-26",
        "count": 4,
        "kind": "a",
        "maybe": 1.5,
        "items": [True, True],
    }


# -- vLLM's field readers and validation errors (inferledger/sim_errors.py) ----------------------

LAX_CASES = {
    "i": [
        *(16, "16", "16.0", " +16 ", "-0", "1_000", "1__0", "_1", "16.", "16.5", "0x10", ""),
        *("١٢", 1.0, 1.5, float("inf"), float("nan"), True, [1], {}),
    ],
    "f": ["1.5", " 2 ", "1e3", "inf", "nan", "x", "", "0x10", True, 3, 2.5, [1]],
    "b": [True, 0, 1, 2, -1, 0.0, 1.0, 2.0, 0.5, "yes", "On", "F", "x", "", " true ", [1], {}],
}


def test_the_lax_readers_take_what_pydantic_takes() -> None:
    """FastAPI validates vLLM's request models with pydantic's lax mode; the readers every
    endpoint uses must accept, convert and reject as it does (error types and messages)."""
    pydantic = pytest.importorskip("pydantic")

    class Fields(pydantic.BaseModel):
        i: int | None = None
        f: float | None = None
        b: bool | None = None

    readers = {"i": lax_int, "f": lax_float, "b": lax_bool}
    for name, values in LAX_CASES.items():
        for value in values:
            got, err = readers[name](value, f"body.{name}")
            try:
                want = getattr(Fields(**{name: value}), name)
            except pydantic.ValidationError as exc:
                (error,) = exc.errors()
                assert err is not None, (name, value)
                assert (err.kind, err.msg) == (error["type"], error["msg"]), (name, value)
                continue
            assert err is None, (name, value, err)
            assert type(got) is type(want), (name, value)
            assert got == want or (math.isnan(got) and math.isnan(want)), (name, value)


def test_validation_errors_are_bounded_as_vllms_handler_bounds_them() -> None:
    """vllm/entrypoints/serve/exception_handling/handlers/validation.py: at most ten errors
    reported, each input cut at 200 characters (containers described), each line at 1000."""
    int_type = "Input should be a valid integer"
    errors = [FieldError("int_type", f"body.tokens.{i}", int_type, "x") for i in range(12)]
    errors += [FieldError("missing", "body.input", "Field required", "y" * 300)]
    message = str(validation_error(errors))
    lines = message.split("\n")
    assert lines[0] == "13 validation errors:" and len(lines) == 12
    assert lines[-1] == "  ...and 3 more errors"
    long = FieldError("string_type", "body.x", "m", {"k": 1}, {"error": "z" * 2000})
    assert "'input': '<dict of 1 items>'" in long.render()
    assert long.render().endswith("...[truncated]") and len(long.render()) == 1014
    assert FieldError("t", "body", "m", "q" * 300).render().count("q") == 200
    raised = validator_error({}, "bad", "top_logprobs", 3)
    assert raised.param == "top_logprobs" and raised.kind == "Bad Request"
    assert "'msg': 'Value error, bad (parameter=top_logprobs, value=3)'" in str(raised)
    assert "'ctx': {'error': VLLMValidationError('bad')}" in str(raised)
    assert validator_error({}, ValueError("plain")).param == "body"
