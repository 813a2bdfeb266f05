"""The OpenAPI 3.1 document of /api/v1/ (served at /api/v1/openapi.json), generated from the
view catalog so every analyst view is a documented enum value of ``NAME``, and every
parameter the endpoints accept is listed (tests/test_api_views.py sends each one).
Specification: https://spec.openapis.org/oas/v3.1.0 (JSON Schema 2020-12 for schemas).
"""

from __future__ import annotations

from typing import Any

from ledger.catalog import load_catalog

VERSION = "1"

_ERROR = {"$ref": "#/components/schemas/Error"}


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "A bad parameter (the message names it).",
        401: "No token, or the token does not authenticate (the message says why).",
        403: "The token's user lacks the analyst role.",
        404: "No such budget or view.",
        405: "A method other than GET or HEAD.",
        504: "The query ran past storage.read_timeout_s.",
    }
    return {
        str(code): {
            "description": text[code],
            "content": {"application/json": {"schema": _ERROR}},
        }
        for code in codes
    }


def _param(name: str, where: str, schema: dict[str, Any], text: str, **extra: Any) -> dict:
    return {"name": name, "in": where, "schema": schema, "description": text, **extra}


def openapi_document(formats: dict[str, str], default_limit: int, max_limit: int) -> dict[str, Any]:
    """The document, as a JSON-ready dict, for the views API's `formats` (name -> media type)
    and page limits (app/api_views.py passes its own)."""
    catalog = load_catalog()
    names = [v.name for v in catalog.views]
    timed = [v.name for v in catalog.views if v.time_column]
    instant = {"type": "string", "format": "date-time"}
    page_params = [
        _param(
            "name",
            "path",
            {"type": "string", "enum": names},
            "An analyst view (docs/views.md).",
            required=True,
        ),
        _param(
            "from",
            "query",
            instant,
            "Rows whose time column is at or after this ISO 8601 instant (no offset: UTC). "
            f"Only views with a time column: {', '.join(timed)}; others answer 400.",
        ),
        _param("to", "query", instant, "Rows whose time column is before this instant."),
        _param(
            "format",
            "query",
            {"type": "string", "enum": list(formats), "default": "json"},
            "json: an object with rows and next; csv, jsonl, parquet: the rows as a file.",
        ),
        _param(
            "limit",
            "query",
            {"type": "integer", "minimum": 1, "maximum": max_limit, "default": default_limit},
            "Rows per page.",
        ),
        _param(
            "cursor",
            "query",
            {"type": "string"},
            "Opaque: the next page's position, from the previous page's next link.",
        ),
    ]
    file_content = {
        mime: {"schema": {"type": "string"}} for fmt, mime in formats.items() if fmt != "json"
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "InferLedger read-only API",
            "version": VERSION,
            "description": "Budget status and the analyst views. Every endpoint but this "
            "document needs 'Authorization: Bearer <token>' (a per-user API token). "
            "docs/api.md.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/budgets": {
                "get": {
                    "summary": "Where every budget stands (any role).",
                    "operationId": "getBudgets",
                    "parameters": [
                        _param("name", "query", {"type": "string"}, "Only this budget."),
                        _param("at", "query", instant, "As of this instant (default: now)."),
                    ],
                    "responses": {
                        "200": {
                            "description": "The budgets' status (docs/api.md).",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Budgets"}
                                }
                            },
                        },
                        **_errors(400, 401, 404, 405, 504),
                    },
                }
            },
            "/api/v1/views": {
                "get": {
                    "summary": "The view catalog (analyst or admin).",
                    "operationId": "listViews",
                    "responses": {
                        "200": {
                            "description": "Every analyst view with its typed columns.",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Catalog"}
                                }
                            },
                        },
                        **_errors(400, 401, 403, 405),
                    },
                }
            },
            "/api/v1/views/{name}": {
                "get": {
                    "summary": "One page of a view's rows, in its key order (analyst or admin).",
                    "operationId": "getViewRows",
                    "parameters": page_params,
                    "responses": {
                        "200": {
                            "description": "A page; a Link header (rel=next) when more follow.",
                            "headers": {
                                "Link": {
                                    "schema": {"type": "string"},
                                    "description": '<url>; rel="next" when more rows follow.',
                                }
                            },
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/ViewPage"}
                                },
                                **file_content,
                            },
                        },
                        **_errors(400, 401, 403, 404, 405, 504),
                    },
                }
            },
            "/api/v1/openapi.json": {
                "get": {
                    "summary": "This document (no token needed).",
                    "operationId": "getOpenApi",
                    "security": [],
                    "responses": {"200": {"description": "The OpenAPI 3.1 document."}},
                }
            },
        },
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A per-user API token, ilt_… (docs/api.md).",
                }
            },
            "schemas": _schemas(names),
        },
    }


def _schemas(names: list[str]) -> dict[str, Any]:
    nullable_text = {"type": ["string", "null"]}
    column = {
        "type": "object",
        "required": ["name", "type"],
        "properties": {
            "name": {"type": "string"},
            "type": {"type": "string", "description": "DuckDB type"},
            "unit": nullable_text,
            "meaning": {"type": "string"},
        },
    }
    return {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"type": "string"}},
        },
        "Budgets": {
            "type": "object",
            "required": ["as_of", "budgets"],
            "properties": {
                "as_of": {"type": "string", "format": "date-time"},
                "budgets": {"type": "array", "items": {"type": "object"}},
            },
        },
        "Column": column,
        "View": {
            "type": "object",
            "required": ["name", "grain", "columns"],
            "properties": {
                "name": {"type": "string", "enum": names},
                "section": {"type": "string"},
                "grain": {"type": "string"},
                "what_for": {"type": "string"},
                "time_column": nullable_text,
                "order_by": {"type": "array", "items": {"type": "string"}},
                "columns": {"type": "array", "items": {"$ref": "#/components/schemas/Column"}},
                "examples": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"title": {"type": "string"}, "sql": {"type": "string"}},
                    },
                },
            },
        },
        "Catalog": {
            "type": "object",
            "required": ["views"],
            "properties": {
                "views": {"type": "array", "items": {"$ref": "#/components/schemas/View"}}
            },
        },
        "ViewPage": {
            "type": "object",
            "required": ["view", "columns", "rows", "count", "next"],
            "properties": {
                "view": {"type": "string", "enum": names},
                "from": nullable_text,
                "to": nullable_text,
                "time_column": nullable_text,
                "order_by": {"type": "array", "items": {"type": "string"}},
                "columns": {"type": "array", "items": {"$ref": "#/components/schemas/Column"}},
                "count": {"type": "integer"},
                "rows": {"type": "array", "items": {"type": "object"}},
                "next": {"type": ["string", "null"], "format": "uri"},
            },
        },
    }
