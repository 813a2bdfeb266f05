"""The stand-in's identity and the endpoints vLLM's OpenAI-compatible server has beyond
completions and chat: /version, /v1/models, /ping, /tokenize, /detokenize and the Responses API
(/v1/responses). `register(app, sim)` adds them to the Flask app create_app builds (after its own
routes: where create_app already routes a path, its view is replaced).

What each answers follows vLLM's source (cited per view); the protocol is
inferledger/sim_tokenize.py, inferledger/sim_responses.py (bodies, stream events),
inferledger/sim_prompts.py (the chat template) and inferledger/sim_errors.py (vLLM's errors, as
for completions and chat). docs/sim-server.md ("Endpoints") is the user's guide.

Identity: /version reports the vLLM release the stand-in imitates (VLLM_VERSION, the
`gpu` extra's pin in pyproject.toml), so clients that branch on it behave as against that
release. The stand-in stays identifiable elsewhere: every response's `Server` header is
"inferledger-sim" (waitress's ident; uvicorn would say "uvicorn") and the router's
/sim/metrics serves the simulator's own inferledger_sim_* series.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import flask

from inferledger.core.errors import BadInputError
from inferledger.sim_engine import PendingRequest
from inferledger.sim_errors import ApiError, check_model
from inferledger.sim_outputs import Ending, Plan, plan_choice, seed_of, shown_text
from inferledger.sim_prompts import chat_prompt, render_template, tool_param
from inferledger.sim_responses import (
    ResponseEvents,
    ResponsesRequest,
    check_responses,
    error_event,
    final_output,
    not_found,
    parse_responses,
    prompt_too_long,
    response_body,
    usage,
)
from inferledger.sim_server.exchange import (
    SIMULATION_FAILED,
    Served,
    json_body,
    json_response,
    stream_response,
    submit,
    wait_record,
    wakeups,
)
from inferledger.sim_tokenize import parse_detokenize, parse_tokenize, token_str
from models.model_catalog import ModelConfig, get_model
from models.serving.records import RequestRecord
from models.steptime import RooflinePredictor
from models.tokenizer import Tokenizer

#: The vLLM release the stand-in imitates: pyproject.toml's `gpu` extra pins it
#: (tests/test_sim_identity.py checks the two agree).
VLLM_VERSION = "0.33.0"


def register(app: flask.Flask, sim: Served) -> None:
    """Add (or, where create_app already routes the path, replace) the views of this module."""

    def route(path: str, endpoint: str, view: Callable[..., flask.Response], *methods: str) -> None:
        if endpoint in app.view_functions:
            app.view_functions[endpoint] = view
        else:
            # No automatic OPTIONS, as create_app's own routes (vLLM answers OPTIONS 405).
            app.add_url_rule(
                path, endpoint, view, methods=list(methods), provide_automatic_options=False
            )

    route("/version", "version", version, "GET")
    route("/v1/models", "models", lambda: models(sim), "GET")
    # SageMaker's health check (vllm/entrypoints/sagemaker/api_router.py): /health's answer
    route("/ping", "ping", lambda: app.view_functions["health"](), "GET", "POST")
    route("/tokenize", "tokenize", lambda: tokenize(sim), "POST")
    route("/detokenize", "detokenize", lambda: detokenize(sim), "POST")
    route("/v1/responses", "responses", lambda: responses(sim), "POST")
    route("/v1/responses/<response_id>", "responses_retrieve", _missing_response, "GET")
    route("/v1/responses/<response_id>/cancel", "responses_cancel", _missing_response, "POST")


# --- identity ---------------------------------------------------------------------------------


def version() -> flask.Response:
    """GET /version (vllm/entrypoints/serve/instrumentator/basic.py): {"version": ...}."""
    return json_response(200, {"version": VLLM_VERSION})


def model_entry(sim: Served) -> ModelConfig | None:
    """The catalog model the simulation serves: the step-time predictor's, else the first
    served name the catalog knows (None for a test predictor under unknown names)."""
    options = getattr(sim, "options", None)
    predictor = getattr(options, "predictor", None)
    if isinstance(predictor, RooflinePredictor):
        return predictor.profile.config
    for name in sim.served_model_names:
        try:
            return get_model(name)
        except BadInputError:
            continue
    return None


def model_path(sim: Served) -> str:
    """What vLLM calls the model's path (its --model): the catalog's Hugging Face id."""
    entry = model_entry(sim)
    return entry.hf_id if entry is not None and entry.hf_id else sim.served_model_names[0]


def models(sim: Served) -> flask.Response:
    """GET /v1/models (vllm/entrypoints/openai/models/serving.py show_available_models, with
    ModelCard and ModelPermission from engine/protocol.py): one card per served name, `root`
    the model path, `created` and the permission made at request time as vLLM's pydantic
    defaults make them."""
    now = int(time.time())
    root = model_path(sim)
    data = [
        {
            "id": name,
            "object": "model",
            "created": now,
            "owned_by": "vllm",
            "root": root,
            "parent": None,
            "max_model_len": sim.max_model_len,
            "permission": [_permission(now)],
        }
        for name in sim.served_model_names
    ]
    return json_response(200, {"object": "list", "data": data})


def _permission(created: int) -> dict[str, Any]:
    return {
        "id": f"modelperm-{uuid.uuid4().hex}",
        "object": "model_permission",
        "created": created,
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


# --- tokenizer --------------------------------------------------------------------------------


def tokenize(sim: Served) -> flask.Response:
    """POST /tokenize (vllm/entrypoints/serve/tokenize/serving.py create_tokenize): a prompt
    (BOS added unless add_special_tokens is false) or chat messages rendered by the template
    (no BOS beyond the template's unless add_special_tokens) → count, max_model_len, tokens and
    token_strs (null unless return_token_strs)."""
    body = json_body()
    req = parse_tokenize(body)  # pydantic's validation comes first, then the model check
    check_model(body, sim.served_model_names)
    tok = sim.limits.tok  # the tokenizer completions and chat count with
    if req.prompt is not None:
        ids = tok.encode(req.prompt, add_bos=req.add_special_tokens)
    else:
        tools = None
        if req.tools is not None:
            tools = [tool_param(t) for t in req.tools]
        text = render_template(
            tok,
            req.messages,
            tools=tools,
            add_generation_prompt=req.add_generation_prompt,
        )
        if req.continue_final_message and req.messages:
            text = _open_final_message(text, req.messages[-1])
        ids = tok.encode(text, add_bos=req.add_special_tokens)
    strs = None
    if req.return_token_strs:
        strs = [token_str(tok.encoding.decode_single_token_bytes(i)) for i in ids]
    return json_response(
        200,
        {"count": len(ids), "max_model_len": sim.max_model_len, "tokens": ids, "token_strs": strs},
    )


def _open_final_message(text: str, last: dict[str, Any]) -> str:
    """continue_final_message: the rendering cut right after the final message's content, so
    the model continues it (Hugging Face's apply_chat_template does the same)."""
    content = (last.get("content") or "").strip()
    end = text.rfind(content) if content else -1
    return text[: end + len(content)] if end >= 0 else text


def detokenize(sim: Served) -> flask.Response:
    """POST /detokenize (create_detokenize): the ids' text, special tokens written out. Ids
    outside the vocabulary are skipped, as Hugging Face's fast tokenizer skips them."""
    body = json_body()
    ids = parse_detokenize(body)  # pydantic's validation comes first, then the model check
    check_model(body, sim.served_model_names)
    tok = sim.limits.tok  # the tokenizer completions and chat count with
    return json_response(200, {"prompt": tok.decode([i for i in ids if tok.is_valid_id(i)])})


# --- /v1/responses ----------------------------------------------------------------------------


def _missing_response(response_id: str) -> flask.Response:
    """GET /v1/responses/{id} and POST .../cancel: vLLM's default keeps no responses."""
    raise not_found(response_id)


def responses(sim: Served) -> flask.Response:
    """POST /v1/responses (vllm/entrypoints/openai/responses/serving.py create_responses, a
    model without reasoning or tool parsers): the input and instructions become chat messages,
    rendered by the template with the request's tools; the simulated engine generates the
    answer (ending at EOS drawn as for chat, or at max_output_tokens: status "incomplete");
    the answer comes whole or as Responses API events."""
    body = json_body()
    req = parse_responses(body)  # pydantic's validation comes first, then the model check
    check_model(body, sim.served_model_names)
    check_responses(req)
    tok = sim.limits.tok  # the tokenizer completions and chat count with
    prompt = chat_prompt(tok, req.messages, sim.limits.block_size, req.tool_dicts)
    prompt_tokens = len(prompt.ids)
    if prompt_tokens >= sim.max_model_len:
        raise prompt_too_long(prompt_tokens, sim.max_model_len)
    room = sim.max_model_len - prompt_tokens  # vLLM's default max_tokens
    max_tokens = room if req.max_output_tokens is None else min(req.max_output_tokens, room)
    if max_tokens < 1:
        raise ApiError(f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    plan = plan_choice(tok, Ending(chat=True), seed_of(None, req.request_id, 0), max_tokens)
    params = {
        "max_tokens": max_tokens,
        "temperature": req.echo["temperature"],
        "top_p": req.echo["top_p"],
        "n": 1,
    }
    pendings = submit(
        sim,
        [(req.request_id, prompt.segments, plan.length)],
        max_tokens=max_tokens,
        params=params,
        stream=req.stream,
    )
    answer = _Answer(sim, req, tok, plan, prompt_tokens, max_tokens, int(time.time()))
    if not req.stream:
        return json_response(200, answer.final(wait_record(sim, pendings[0])))
    return stream_response(sim, answer.events(pendings), pendings)


@dataclass(frozen=True, slots=True)
class _Answer:
    """One response's bodies: the finished response, or its stream of events."""

    sim: Served
    req: ResponsesRequest
    tok: Tokenizer
    plan: Plan
    prompt_tokens: int
    max_tokens: int
    created_at: int

    @property
    def model(self) -> str:
        # ResponsesResponse.model is the first served name (OpenAIServingModels.model_name)
        return self.sim.served_model_names[0]

    def body(self, output: list[dict[str, Any]], status: str, usage_body: Any) -> dict[str, Any]:
        return response_body(
            self.req,
            model=self.model,
            created_at=self.created_at,
            max_output_tokens=self.max_tokens,
            output=output,
            status=status,
            usage_body=usage_body,
        )

    def final(self, record: RequestRecord) -> dict[str, Any]:
        reason = record.finish_reason.value
        if reason == "error":
            raise ApiError("Internal server error", status=500)
        n = record.output_tokens
        text = shown_text(self.tok, self.plan, 0, n)
        status = "incomplete" if reason == "length" else "completed"
        return self.body(
            final_output(text, [] if self.req.include_logprobs else None),
            status,
            usage(self.prompt_tokens, record.cached_tokens or 0, n),
        )

    def events(self, pendings: Sequence[PendingRequest]) -> Iterator[bytes]:
        """SSE events as the simulation produces tokens (exchange.wakeups: called in the view,
        the events made after it has returned)."""
        (pending,) = pendings
        moments = wakeups(self.sim, pendings)

        def body() -> Iterator[bytes]:
            stream = ResponseEvents(self.body([], "in_progress", None))
            yield from stream.start()
            sent = 0
            for alive in moments:
                if not alive:
                    yield error_event(SIMULATION_FAILED, stream.seq)
                    return
                record = pending.record
                n = record.output_tokens if record is not None else pending.tokens
                if n > sent:
                    yield from stream.delta(shown_text(self.tok, self.plan, sent, n))
                    sent = n
                if record is not None:
                    try:
                        final = self.final(record)
                    except ApiError as exc:
                        yield error_event(str(exc), stream.seq)
                        return
                    yield from stream.finish(final)
                    return

        return body()
