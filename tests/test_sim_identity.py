"""The stand-in vLLM server's identity and the endpoints vLLM has beyond completions and chat
(inferledger/sim_server/extra_routes.py, inferledger/sim_responses.py): /version, /v1/models,
/ping, /tokenize, /detokenize and /v1/responses, driven over real sockets, /v1/models and
/v1/responses with the real OpenAI SDK. Each shape is checked against the fields vLLM's
pydantic models define (the files are cited per test); nothing of ours is mocked.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import threading
import time
import tomllib
from collections.abc import Iterator

import openai
import pytest
import requests

from inferledger import simulate
from inferledger.core.errors import BadInputError
from inferledger.sim_outputs import draw_length, seed_of
from inferledger.sim_server import SimServer, serve_options_from_scenario
from inferledger.sim_server.extra_routes import VLLM_VERSION
from models.model_catalog import get_model, load_model_catalog
from models.tokenizer import tokenizer_for
from tests.conftest import ROOT, serving_sim

HF_ID = "meta-llama/Llama-3.1-8B-Instruct"
SERVED = (HF_ID, "llama-3.1-8b", "Llama-3.1-8B")
MAX_MODEL_LEN = 4096


def _options(*flags: str):
    parser = argparse.ArgumentParser()
    simulate.add_parser(parser.add_subparsers())
    args = parser.parse_args(["simulate", "--serve", "--gpu", "h200", *flags])
    return serve_options_from_scenario(args, simulate.scenario_from_args(args))


class Sim:
    def __init__(self, server: SimServer, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread
        host, port = server.addresses["router"]
        self.url = f"http://{host}:{port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="x", max_retries=0)

    def post(self, path: str, body: object) -> requests.Response:
        return requests.post(self.url + path, json=body, timeout=30)


@contextlib.contextmanager
def _serving(**changes: object) -> Iterator[Sim]:
    """`inferledger simulate --serve --model llama-3.1-8b --gpu h200` on free ports, with
    `changes` to its options."""
    options = dataclasses.replace(
        _options("--model", "llama-3.1-8b", "--max-model-len", str(MAX_MODEL_LEN)),
        port=0,
        dcgm_port=None,
        **changes,
    )
    with serving_sim(options) as running:
        yield Sim(*running)


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    with _serving(speed=50.0, threads=16, drain_timeout_s=1.0) as running:
        yield running


def _error(resp: requests.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == status
    return body["error"]


# --- identity ---------------------------------------------------------------------------------


def test_default_served_names_put_the_hugging_face_id_first() -> None:
    assert _options("--model", "llama-3.1-8b").served_model_names == SERVED
    assert _options("--model", HF_ID).served_model_names == (HF_ID, "Llama-3.1-8B")
    given = _options("--model", "llama-3.1-8b", "--served-model-name", "a", "b")
    assert given.served_model_names == ("a", "b")


def test_version_is_the_imitated_vllm_release_and_the_server_header_names_the_stand_in(
    sim,
) -> None:
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"vllm=={VLLM_VERSION}" in pins["gpu"]
    resp = requests.get(sim.url + "/version", timeout=10)
    assert resp.status_code == 200 and resp.json() == {"version": VLLM_VERSION}
    assert resp.headers["Server"] == "inferledger-sim"
    assert requests.post(sim.url + "/version", timeout=10).status_code == 405


def test_models_match_vllms_model_card_with_the_sdk(sim) -> None:
    """ModelCard and ModelPermission: vllm/entrypoints/openai/engine/protocol.py; root is the
    model path (models/serving.py show_available_models)."""
    listed = sim.client.models.list()
    assert [m.id for m in listed.data] == list(SERVED)
    raw = requests.get(sim.url + "/v1/models", timeout=10).json()
    assert list(raw) == ["object", "data"] and raw["object"] == "list"
    for card in raw["data"]:
        assert list(card) == [
            "id",
            "object",
            "created",
            "owned_by",
            "root",
            "parent",
            "max_model_len",
            "permission",
        ]
        assert card["object"] == "model" and card["owned_by"] == "vllm"
        assert card["root"] == HF_ID and card["parent"] is None
        assert card["max_model_len"] == MAX_MODEL_LEN
        (perm,) = card["permission"]
        assert perm["id"].startswith("modelperm-") and len(perm["id"]) == len("modelperm-") + 32
        assert {k: v for k, v in perm.items() if k not in ("id", "created")} == {
            "object": "model_permission",
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        assert isinstance(perm["created"], int) and perm["created"] == card["created"]


def test_ping_answers_get_and_post_like_health(sim) -> None:
    """vllm/entrypoints/sagemaker/api_router.py: /ping is /health, for GET and POST."""
    for method in ("get", "post"):
        resp = getattr(requests, method)(sim.url + "/ping", timeout=10)
        assert resp.status_code == 200 and resp.content == b""
        assert "Content-Type" not in resp.headers
    assert requests.put(sim.url + "/ping", timeout=10).status_code == 405


# --- tokenizer --------------------------------------------------------------------------------


def test_tokenize_a_prompt_and_messages(sim) -> None:
    """TokenizeCompletionRequest / TokenizeChatRequest / TokenizeResponse:
    vllm/entrypoints/serve/tokenize/protocol.py."""
    tok = tokenizer_for(HF_ID)
    body = sim.post("/tokenize", {"prompt": "Hello world"}).json()
    assert body == {
        "count": 3,
        "max_model_len": MAX_MODEL_LEN,
        "tokens": tok.encode("Hello world", add_bos=True),
        "token_strs": None,
    }
    strs = sim.post("/tokenize", {"prompt": "Hello world", "return_token_strs": True}).json()
    assert strs["token_strs"] == ["<|begin_of_text|>", "Hello", "Ġworld"]
    bare = sim.post("/tokenize", {"prompt": "Hello world", "add_special_tokens": False}).json()
    assert bare["tokens"] == strs["tokens"][1:]
    # Llama-3.1-8B-Instruct's template counts (the figures in docs/sim-server.md)
    for messages, count in (
        ([{"role": "user", "content": "Hello!"}], 37),
        (
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the capital of France?"},
            ],
            48,
        ),
    ):
        chat = sim.post("/tokenize", {"model": "llama-3.1-8b", "messages": messages}).json()
        assert chat["count"] == count == len(chat["tokens"])
        assert chat["tokens"][0] == tok.bos_id and chat["tokens"].count(tok.bos_id) == 1
    plain = sim.post(
        "/tokenize",
        {"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": False},
    ).json()
    assert plain["count"] == 37 - 4  # no "<|start_header_id|>assistant<|end_header_id|>\n\n"
    prefill = {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "The answer is"},
        ],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    ids = sim.post("/tokenize", prefill).json()["tokens"]
    assert (
        sim.post("/detokenize", {"tokens": ids})
        .json()["prompt"]
        .endswith("<|start_header_id|>assistant<|end_header_id|>\n\nThe answer is")
    )


def test_tokenize_errors_as_vllm_answers_them(sim) -> None:
    """Validation errors: vllm/entrypoints/serve/exception_handling/handlers/validation.py."""
    neither = _error(sim.post("/tokenize", {}), 400)
    assert neither["type"] == "Bad Request"
    assert neither["message"].startswith("2 validation errors:\n  {'type': 'missing'")
    assert neither["param"] == "body.TokenizeCompletionRequest.prompt"
    unknown = _error(sim.post("/tokenize", {"model": "gpt-4", "prompt": "x"}), 404)
    assert unknown["message"] == "The model `gpt-4` does not exist."
    assert unknown["type"] == "NotFoundError" and unknown["param"] == "model"
    both = {
        "messages": [{"role": "user", "content": "x"}],
        "continue_final_message": True,
        "add_generation_prompt": True,
    }
    clash = _error(sim.post("/tokenize", both), 400)
    assert clash["message"].startswith("2 validation errors:\n  {'type': 'missing'")
    assert "'msg': 'Value error, Cannot set both `continue_final_message` and " in clash["message"]
    # a union: a prompt of the wrong type fails the completion request, and the chat request
    # misses its messages
    wrong = _error(sim.post("/tokenize", {"prompt": 5}), 400)
    assert (
        "'type': 'string_type', 'loc': 'body.TokenizeCompletionRequest.prompt'" in wrong["message"]
    )
    assert "'loc': 'body.TokenizeChatRequest.messages'" in wrong["message"]
    bad_json = requests.post(sim.url + "/tokenize", data=b"{nope", timeout=10)
    assert "'type': 'json_invalid'" in _error(bad_json, 400)["message"]


def test_detokenize_round_trips_and_validates(sim) -> None:
    """DetokenizeRequest (0 <= id <= 2**63 - 1) and DetokenizeResponse."""
    ids = sim.post("/tokenize", {"prompt": "Ship it!"}).json()["tokens"]
    assert sim.post("/detokenize", {"tokens": ids}).json() == {
        "prompt": "<|begin_of_text|>Ship it!"
    }
    # numeric strings pass pydantic's lax mode; ids outside the vocabulary are skipped
    assert sim.post("/detokenize", {"tokens": [str(i) for i in ids[1:]] + [10**9]}).json() == {
        "prompt": "Ship it!"
    }
    err = _error(sim.post("/detokenize", {"tokens": [1, -1, "x"]}), 400)
    assert err["message"].startswith("2 validation errors:\n")
    assert "'type': 'greater_than_equal', 'loc': 'body.tokens.1'" in err["message"]
    assert err["param"] == "body.tokens.1"
    assert _error(sim.post("/detokenize", {}), 400)["param"] == "body.tokens"


# --- /v1/responses ----------------------------------------------------------------------------

#: ResponsesResponse's fields in order (vllm/entrypoints/openai/responses/protocol.py)
RESPONSE_FIELDS = [
    "id",
    "created_at",
    "incomplete_details",
    "instructions",
    "metadata",
    "model",
    "object",
    "output",
    "parallel_tool_calls",
    "temperature",
    "tool_choice",
    "tools",
    "top_p",
    "background",
    "max_output_tokens",
    "max_tool_calls",
    "previous_response_id",
    "prompt",
    "reasoning",
    "service_tier",
    "status",
    "text",
    "top_logprobs",
    "truncation",
    "usage",
    "user",
    "input_messages",
    "output_messages",
]


def _prompt_tokens(messages: list[dict]) -> int:
    """The request's tools (an empty list by default) reach the chat template, as vLLM's
    construct_tool_dicts passes them (docs/sim-server.md, "Endpoints")."""
    tok = tokenizer_for(HF_ID)
    return len(tok.encode(tok.render_chat(messages, tools=[])))


def test_responses_with_the_sdk(sim) -> None:
    """responses_full_generator and _make_response_output_items (responses/serving.py)."""
    resp = sim.client.responses.create(
        model="llama-3.1-8b", input="Hello!", instructions="Be brief.", max_output_tokens=4
    )
    # output lengths are drawn from 20 tokens up (inferledger/sim_outputs.py): 4 cuts the answer
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.model == HF_ID and resp.object == "response" and resp.id.startswith("resp_")
    (message,) = resp.output
    assert message.type == "message" and message.role == "assistant"
    assert message.status == "completed" and message.id.startswith("msg_")
    assert resp.output_text and len(tokenizer_for(HF_ID).encode(resp.output_text)) == 4
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}]
    assert resp.usage.input_tokens == _prompt_tokens(messages)
    assert resp.usage.output_tokens == 4
    assert resp.usage.total_tokens == resp.usage.input_tokens + 4
    assert resp.max_output_tokens == 4 and resp.temperature == 1.0 and resp.top_p == 1.0

    raw = sim.post("/v1/responses", {"input": "Hello!", "max_output_tokens": 64}).json()
    assert list(raw) == RESPONSE_FIELDS
    assert raw["model"] == HF_ID and raw["status"] in ("completed", "incomplete")
    usage = raw["usage"]
    assert set(usage) == {
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    }
    assert usage["input_tokens_details"] == {
        "cached_tokens": usage["input_tokens_details"]["cached_tokens"],
        "input_tokens_per_turn": [],
        "cached_tokens_per_turn": [],
    }
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0
    (part,) = raw["output"][0]["content"]
    assert part == {
        "annotations": [],
        "text": part["text"],
        "type": "output_text",
        "logprobs": None,
    }


def test_responses_without_max_output_tokens_end_at_eos(sim) -> None:
    raw = sim.post("/v1/responses", {"input": "Hello!"}).json()
    assert raw["status"] == "completed" and raw["incomplete_details"] is None
    assert raw["usage"]["input_tokens"] == 93  # the figure docs/sim-server.md quotes
    room = MAX_MODEL_LEN - raw["usage"]["input_tokens"]
    assert raw["max_output_tokens"] == room  # vLLM's default: the rest of the context
    assert 0 < raw["usage"]["output_tokens"] < room


def test_streamed_responses_with_the_sdk(sim) -> None:
    """_process_simple_streaming_events and responses_stream_generator: created, in_progress,
    output_item.added, content_part.added, output_text.delta..., output_text.done,
    content_part.done, output_item.done, completed; sequence numbers 0, 1, 2, ..."""
    events = list(sim.client.responses.create(input="Hello!", max_output_tokens=16, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == len(kinds) - 8 and deltas
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.usage is None
    text = "".join(d.delta for d in deltas)
    assert events[-4].text == text
    final = events[-1].response
    # output lengths are drawn from 20 tokens up: 16 always cuts the answer
    assert final.output_text == text and final.usage.output_tokens == 16
    assert final.status == "incomplete"
    # vLLM's quirks: content_index counts every event; the streamed item id is a bare UUID
    assert [d.content_index for d in deltas] == list(range(1, len(deltas) + 1))
    assert deltas[0].item_id == events[2].item.id and len(deltas[0].item_id) == 36


def test_responses_errors_as_vllm_answers_them(sim) -> None:
    with pytest.raises(openai.NotFoundError) as missing_model:
        sim.client.responses.create(model="gpt-4", input="x")
    assert missing_model.value.body["message"] == "The model `gpt-4` does not exist."
    with pytest.raises(openai.BadRequestError) as background:
        sim.client.responses.create(input="x", background=True)
    assert "does not support `store=True`" in background.value.body["message"]
    with pytest.raises(openai.NotFoundError) as previous:
        sim.client.responses.create(input="x", previous_response_id="resp_gone")
    assert previous.value.body["message"] == "Response with id 'resp_gone' not found."
    no_input = _error(sim.post("/v1/responses", {"model": HF_ID}), 400)
    assert no_input["message"].startswith("1 validation error:\n  {'type': 'missing'")
    assert no_input["param"] == "body.input"
    assert _error(requests.get(sim.url + "/v1/responses/resp_x", timeout=10), 404)["param"] == (
        "response_id"
    )
    too_long = _error(sim.post("/v1/responses", {"input": "word " * MAX_MODEL_LEN}), 400)
    assert too_long["message"].startswith("The engine prompt length ")


# --- the catalog ------------------------------------------------------------------------------


def test_catalog_models_carry_their_hugging_face_id(tmp_path) -> None:
    assert get_model("llama-3.1-8b").hf_id == HF_ID
    assert get_model("meta-llama/Llama-3.1-70B-Instruct").hf_id == (
        "meta-llama/Llama-3.1-70B-Instruct"
    )
    entry = (
        "  - {name: M, num_layers: 1, hidden_size: 8, num_q_heads: 1, num_kv_heads: 1,\n"
        "     head_dim: 8, ffn_size: 8, vocab_size: 8, hf_id: %s}\n"
    )
    path = tmp_path / "models.yaml"
    for bad in ("no-slash", "a/b/c", "'org/na me'", "42"):
        path.write_text("models:\n" + entry % bad)
        with pytest.raises(BadInputError, match="hf_id must be a Hugging Face repository id"):
            load_model_catalog(path)
    # a Hugging Face id is a name too: it may not name two models
    path.write_text("models:\n" + entry % "org/M" + entry.replace("name: M", "name: N") % "x/m")
    with pytest.raises(BadInputError, match="names both"):
        load_model_catalog(path)
    path.write_text("models:\n" + entry % "org/M-1")
    catalog = load_model_catalog(path)
    (model,) = catalog.models
    assert model.hf_id == "org/M-1" and catalog.get("org/M-1") is model


def test_json_bodies_are_compact(sim) -> None:
    text = requests.get(sim.url + "/version", timeout=10).text
    assert text == json.dumps({"version": VLLM_VERSION}, separators=(",", ":"))


def test_responses_render_the_requests_tools_into_the_prompt(sim) -> None:
    """construct_tool_dicts (responses/utils.py): the tools reach the template unless
    tool_choice is "none"; the response echoes them as vLLM dumps them."""
    tool = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    dumped = {**tool, "strict": None, "description": None}
    body = {"input": "Hello!", "tools": [tool], "max_output_tokens": 1}
    with_tools = sim.post("/v1/responses", body).json()
    assert with_tools["tools"] == [dumped] and with_tools["tool_choice"] == "auto"
    tok = tokenizer_for(HF_ID)
    rendered = tok.render_chat(
        [{"role": "user", "content": "Hello!"}], tools=[{"type": "function", "function": dumped}]
    )
    assert with_tools["usage"]["input_tokens"] == len(tok.encode(rendered))
    assert with_tools["usage"]["input_tokens"] > _prompt_tokens(
        [{"role": "user", "content": "Hello!"}]
    )
    none = sim.post("/v1/responses", {**body, "tool_choice": "none"}).json()
    assert none["usage"]["input_tokens"] == 37  # as /v1/chat/completions counts "Hello!"


def test_a_client_gone_mid_response_stream_aborts_the_request() -> None:
    """As for chat streams (app._stream): the body's close aborts the request in the
    simulation, which records finish_reason "abort"."""
    # a request id whose drawn answer is long: ~1 s of decoding at speed 1
    rid = next(
        f"resp_gone{i}" for i in range(100) if draw_length(seed_of(None, f"resp_gone{i}", 0)) > 150
    )
    with _serving(threads=4, drain_timeout_s=0.5) as running:
        server = running.server
        body = {"input": "Hello!", "stream": True, "request_id": rid}
        with requests.post(
            running.url + "/v1/responses", json=body, stream=True, timeout=30
        ) as resp:
            for line in resp.iter_lines():
                if line == b"event: response.output_text.delta":
                    break
        deadline = time.monotonic() + 10
        record = None
        while record is None and time.monotonic() < deadline:
            record = next((r for r in server.engine.records if r.request_id == rid), None)
            time.sleep(0.02)
        assert record is not None and record.finish_reason.value == "abort"
        assert 0 < record.output_tokens < draw_length(seed_of(None, rid, 0))


def test_tokenize_counts_a_chat_with_tools_as_chat_completions_does(sim) -> None:
    """serving_chat and create_tokenize both hand the template the tools' model_dump()
    (ChatCompletionToolsParam): the same messages and tools are the same prompt tokens."""
    messages = [{"role": "user", "content": "Rain in Paris?"}]
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    counted = sim.post("/tokenize", {"messages": messages, "tools": tools}).json()["count"]
    chat = {"messages": messages, "tools": tools, "tool_choice": "required", "max_tokens": 1}
    assert sim.post("/v1/chat/completions", chat).json()["usage"]["prompt_tokens"] == counted
    assert counted > sim.post("/tokenize", {"messages": messages}).json()["count"]
