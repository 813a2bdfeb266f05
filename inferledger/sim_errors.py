"""Errors of the stand-in vLLM server's APIs as vLLM writes them, and the lax field readers that
decide them: the one module every endpoint (completions, chat, /tokenize, /detokenize,
/v1/responses) answers a bad request through. Pure functions; no I/O.

Three kinds, as vLLM has them (github.com/vllm-project/vllm; behaviour, not code):

- what pydantic rejects while FastAPI parses a request model, answered by vLLM's
  RequestValidationError handler (vllm/entrypoints/serve/exception_handling/handlers/
  validation.py): 400, type "Bad Request", "1 validation error:" / "N validation errors:" and
  one line per error (at most ten, each bounded), `param` the VLLMValidationError's parameter
  if a validator raised one, else the first error's location;
- a VLLMValidationError raised while serving (create_error_response in
  vllm/entrypoints/utils.py): 400 "BadRequestError", the message with vllm/exceptions.py's
  "(parameter=..., value=...)" suffix;
- the others by status (404 for an unknown model, ...).

Fields are read as pydantic's lax mode reads them ("16" and "16.0" for an int, "yes" for a
bool); tests/test_sim_compat.py checks the readers against pydantic itself.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferledger.core.errors import InferLedgerError


def dumps(obj: Any) -> bytes:
    """Compact JSON, UTF-8."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


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


class VLLMValidationError(ValueError):
    """vLLM's exception of that name (vllm/exceptions.py): its text carries the
    "(parameter=..., value=...)" suffix; its repr, which a validation error's `ctx` shows, is
    `VLLMValidationError('<message>')`."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        extras = []
        if self.parameter is not None:
            extras.append(f"parameter={self.parameter}")
        if self.value is not None:
            extras.append(f"value={self.value}")
        base = super().__str__()
        return f"{base} ({', '.join(extras)})" if extras else base


def vllm_error(message: str, *, param: str | None = None, value: Any = None) -> ApiError:
    """A VLLMValidationError as create_error_response answers it: 400 BadRequestError, the
    message with its suffix, `param` set."""
    return ApiError(str(VLLMValidationError(message, parameter=param, value=value)), param=param)


# --- pydantic's validation errors, as vLLM's handler answers them -----------------------------

_MAX_REPORTED_ERRORS = 10  # the handler's bounds on what a validation error echoes
_MAX_ERROR_INPUT_CHARS = 200
_MAX_ERROR_CHARS = 1000

#: pydantic's message for a body that is not a JSON object
NOT_AN_OBJECT = "Input should be a valid dictionary or object to extract fields from"


def _summarize(value: Any) -> str:
    """An error's `input` as the handler bounds it: containers described, text cut."""
    if isinstance(value, bytes | bytearray):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = value if isinstance(value, str) else str(value)
    if len(text) > _MAX_ERROR_INPUT_CHARS:
        return text[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]"
    return text


@dataclass(frozen=True, slots=True)
class FieldError:
    """One pydantic error: its type, where (dotted, as vLLM cleans `loc`), message, input and
    context."""

    kind: str
    loc: str
    msg: str
    value: Any
    ctx: Mapping[str, Any] | None = None

    def render(self) -> str:
        err: dict[str, Any] = {
            "type": self.kind,
            "loc": self.loc,
            "msg": self.msg,
            "input": _summarize(self.value),
        }
        if self.ctx is not None:
            err["ctx"] = dict(self.ctx)
        text = str(err)
        return text[:_MAX_ERROR_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_CHARS else text


def validation_error(errors: Sequence[FieldError], param: str | None = None) -> ApiError:
    """The 400 answer of a body that fails validation: type "Bad Request", `param` the first
    VLLMValidationError's parameter (else the first error's location), the message
    "1 validation error:" / "N validation errors:" and one indented line per error (at most
    ten)."""
    if param is None:
        raised = [e.ctx["error"] for e in errors if e.ctx and "error" in e.ctx]
        param = next((x.parameter for x in raised if isinstance(x, VLLMValidationError)), None)
    count = len(errors)
    label = "error" if count == 1 else "errors"
    lines = [f"{count} validation {label}:"]
    lines += [f"  {e.render()}" for e in errors[:_MAX_REPORTED_ERRORS]]
    if count > _MAX_REPORTED_ERRORS:
        lines.append(f"  ...and {count - _MAX_REPORTED_ERRORS} more {label}")
    return ApiError("\n".join(lines), param=param or errors[0].loc, kind="Bad Request")


def field_error(kind: str, loc: tuple[Any, ...], msg: str, value: Any) -> ApiError:
    """One field pydantic rejects (a wrong type, a missing field) at body.<loc>."""
    return validation_error([FieldError(kind, _dotted(loc), msg, value)])


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in ("body", *loc))


def validator_error(
    body: Any, error: str | ValueError, param: str | None = None, value: Any = None
) -> ApiError:
    """A request model's validator (mode="before") raising: pydantic reports a value_error on
    the whole body. `error` given as a message is vLLM's VLLMValidationError(message,
    parameter=param, value=value), which names the param; a plain ValueError leaves it
    "body"."""
    if isinstance(error, str):
        error = VLLMValidationError(error, parameter=param, value=value)
    return validation_error(
        [FieldError("value_error", "body", f"Value error, {error}", body, {"error": error})]
    )


def missing(loc: str, body: Any) -> FieldError:
    return FieldError("missing", loc, "Field required", body)


def object_body(body: Any, *where: str) -> dict[str, Any]:
    """The body as a JSON object, else the error pydantic reports at each of `where` (one
    location per member of a request union; "body" by default)."""
    if not isinstance(body, dict):
        locs = where or ("body",)
        raise validation_error(
            [FieldError("model_attributes_type", loc, NOT_AN_OBJECT, body) for loc in locs]
        )
    return body


def parse_json(data: bytes) -> Any:
    """A request body's JSON; a body that does not parse is answered as FastAPI's json_invalid
    error is by vLLM's handler (its location the offset where parsing failed)."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        where, reason = f"body.{exc.pos}", exc.msg
    except UnicodeDecodeError:
        where, reason = "body.0", "Invalid UTF-8"
    raise validation_error(
        [FieldError("json_invalid", where, "JSON decode error", {}, {"error": reason})]
    )


def model_field(body: Mapping[str, Any]) -> str | None:
    """The model a request names; one that is not a string is pydantic's error."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise field_error("string_type", ("model",), "Input should be a valid string", model)
    return model


def check_model(body: Mapping[str, Any], served: Sequence[str]) -> None:
    """vLLM's _check_model: a request naming no model (absent, null or "") is for the first
    served one; a name not served is a 404."""
    model = model_field(body)
    if model and model not in served:
        raise ApiError(f"The model `{model}` does not exist.", param="model", status=404)


# --- lax field readers (pydantic's lax mode, as FastAPI validates vLLM's request models) -----

_INT_TEXT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def lax_int(value: Any, loc: str) -> tuple[int | None, FieldError | None]:
    """An integer as pydantic's lax mode takes one (bools, whole floats, and numeric strings
    such as " 1_000 " or "16.0"), or the error it reports."""
    if isinstance(value, bool):
        return int(value), None
    if isinstance(value, int):
        return value, None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None, FieldError("finite_number", loc, "Input should be a finite number", value)
        if value.is_integer():
            return int(value), None
        return None, FieldError(
            "int_from_float",
            loc,
            "Input should be a valid integer, got a number with a fractional part",
            value,
        )
    if isinstance(value, str):
        text = value.strip()
        if _INT_TEXT.fullmatch(text):
            return int(text.split(".")[0]), None
        return None, FieldError(
            "int_parsing",
            loc,
            "Input should be a valid integer, unable to parse string as an integer",
            value,
        )
    return None, FieldError("int_type", loc, "Input should be a valid integer", value)


def lax_float(value: Any, loc: str) -> tuple[float | None, FieldError | None]:
    """A number as pydantic's lax mode takes one (numeric strings, "inf" and "nan"
    included)."""
    if isinstance(value, bool | int | float):
        return float(value), None
    if isinstance(value, str):
        try:
            return float(value), None
        except ValueError:
            return None, FieldError(
                "float_parsing",
                loc,
                "Input should be a valid number, unable to parse string as a number",
                value,
            )
    return None, FieldError("float_type", loc, "Input should be a valid number", value)


def lax_bool(value: Any, loc: str) -> tuple[bool | None, FieldError | None]:
    """A boolean as pydantic's lax mode takes one: 0 and 1 (as ints or floats) and the words
    of _TRUE and _FALSE in any case (not stripped); other numbers and strings are a parsing
    error, a fractional float and anything else a type error."""
    if isinstance(value, bool):
        return value, None
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value), None
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE, None
    if isinstance(value, str | int) or (isinstance(value, float) and value.is_integer()):
        return None, FieldError(
            "bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value
        )
    return None, FieldError("bool_type", loc, "Input should be a valid boolean", value)


def _field(body: Mapping[str, Any], name: str, read: Any) -> Any:
    """body[name] through a lax reader (None when absent or null); its error is raised."""
    value = body.get(name)
    if value is None:
        return None
    out, err = read(value, f"body.{name}")
    if err is not None:
        raise validation_error([err])
    return out


def int_field(body: Mapping[str, Any], name: str) -> int | None:
    """An optional int field; a bad value is the request's validation error."""
    return _field(body, name, lax_int)


def float_field(body: Mapping[str, Any], name: str) -> float | None:
    """An optional number field; a bad value is the request's validation error."""
    return _field(body, name, lax_float)


def bool_field(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    """An optional boolean field (null or absent: `default`); a bad value is the request's
    validation error."""
    out = _field(body, name, lax_bool)
    return default if out is None else out


def flag(
    body: Mapping[str, Any],
    name: str,
    default: bool,
    errors: list[FieldError],
    where: str = "body",
) -> bool:
    """bool_field for a validation that reports every error: a bad value joins `errors`
    (located under `where`: "body", or "body.<Model>" for a member of a union)."""
    value = body.get(name)
    if value is None:
        return default
    out, err = lax_bool(value, f"{where}.{name}")
    if err is not None:
        errors.append(err)
    return bool(out)


def stop_field(body: Mapping[str, Any]) -> tuple[str, ...]:
    """`stop`: a string or a list of them, none empty (duplicates dropped)."""
    value = body.get("stop")
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise field_error("string_type", ("stop",), "Input should be a valid string", value)
    if any(not s for s in value):
        raise vllm_error("stop cannot contain an empty string.")
    return tuple(dict.fromkeys(value))


def int_list_field(body: Mapping[str, Any], name: str) -> tuple[int, ...]:
    """An optional list of ints (each read as lax_int; errors located at body.<name>.<i>)."""
    value = body.get(name)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise field_error("list_type", (name,), "Input should be a valid list", value)
    out = [lax_int(v, f"body.{name}.{i}") for i, v in enumerate(value)]
    errors = [err for _, err in out if err is not None]
    if errors:
        raise validation_error(errors)
    return tuple(n for n, _ in out if n is not None)


# --- message content ---------------------------------------------------------------------------

_TEXT_PARTS = ("text", "input_text", "output_text")


def text_content(content: Any, loc: str, errors: list[FieldError]) -> str | None:
    """A message's content as the chat template gets it: a string, or text parts joined with
    newlines, as vLLM's chat_utils joins them for a template that takes string content. Other
    parts (images, audio) are refused: the simulated model reads text only."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
                pieces.append(str(part.get("text", "")))
            else:
                raise ApiError(
                    f"{loc}: only text content parts are supported by the simulated model "
                    f"(of type {', '.join(_TEXT_PARTS)})",
                    param="messages",
                )
        return "\n".join(pieces)
    errors.append(FieldError("string_type", loc, "Input should be a valid string", content))
    return None
