"""docs/openapi.json, the published description of the queue daemon's API, is what the
code serves, and a well-formed OpenAPI 3 document."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from htgrid.net._openapi import render
from htgrid.net.app import published_document

PUBLISHED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
REGENERATE = "python -m htgrid.net._openapi > docs/openapi.json"
METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def _refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                assert isinstance(value, str)
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _unresolved(document: dict[str, Any], ref: str) -> str | None:
    """Why `ref` does not resolve in `document` (None when it does)."""
    if not ref.startswith("#/"):
        return f"{ref}: only references inside the document are used"
    node: object = document
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return f"{ref} does not resolve"
        node = node[part]
    return None


def problems(document: dict[str, Any]) -> list[str]:
    """What keeps `document` from being a structurally sound OpenAPI 3 document."""
    found: list[str] = []
    if not str(document.get("openapi", "")).startswith("3."):
        found.append("`openapi` must be a 3.x version")
    info = document.get("info")
    if not isinstance(info, dict) or not info.get("title") or not info.get("version"):
        found.append("`info` needs a title and a version")
    paths = document.get("paths")
    if not isinstance(paths, dict) or not paths:
        return [*found, "`paths` is missing or empty"]
    operation_ids: list[str] = []
    for path, item in paths.items():
        if not path.startswith("/"):
            found.append(f"{path}: a path starts with /")
        for method, op in item.items():
            where = f"{method.upper()} {path}"
            if method not in METHODS:
                found.append(f"{where}: not an HTTP method")
                continue
            operation_ids.append(op.get("operationId", ""))
            responses = op.get("responses")
            if not isinstance(responses, dict) or not responses:
                found.append(f"{where}: no responses")
                continue
            for code, response in responses.items():
                if not (code == "default" or re.fullmatch(r"[1-5](\d\d|XX)", code)):
                    found.append(f"{where}: {code} is not a status code")
                if not response.get("description"):
                    found.append(f"{where}: response {code} has no description")
            declared = {p["name"] for p in op.get("parameters", []) if p.get("in") == "path"}
            found.extend(
                f"{where}: the path parameter {name} is not declared"
                for name in re.findall(r"\{(\w+)\}", path)
                if name not in declared
            )
            found.extend(
                f"{where}: path parameter {p['name']} must be required"
                for p in op.get("parameters", [])
                if p.get("in") == "path" and p.get("required") is not True
            )
    duplicates = {i for i in operation_ids if operation_ids.count(i) > 1}
    if duplicates or "" in operation_ids:
        found.append(f"operationIds must be unique and present: {sorted(duplicates)}")
    found.extend(filter(None, (_unresolved(document, ref) for ref in _refs(document))))
    return found


def test_the_published_document_is_what_the_code_serves() -> None:
    assert PUBLISHED.exists(), f"{PUBLISHED} is missing: make it with `{REGENERATE}`"
    if PUBLISHED.read_text(encoding="utf-8") != render(published_document()):
        pytest.fail(f"docs/openapi.json is out of date with the routes: run `{REGENERATE}`")


def test_the_published_document_is_sound_openapi() -> None:
    document = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    assert problems(document) == []
    ops = {(m, p) for p, item in document["paths"].items() for m in item}
    assert ("put", "/v1/jobs/{job_id}/input") in ops and ("post", "/v1/jobs/lease") in ops
    upload = document["paths"]["/v1/jobs/{job_id}/input"]["put"]
    assert "MAX_TRANSFER_INPUT_MB" in upload["responses"]["413"]["description"]


def test_the_checks_find_what_is_broken() -> None:
    document = published_document()
    document["paths"]["/v1/jobs/{job_id}"]["get"]["responses"] = {}
    document["paths"]["/v1/jobs/act"]["post"]["requestBody"]["content"]["application/json"][
        "schema"
    ] = {"$ref": "#/components/schemas/Nowhere"}
    assert problems(document) == [
        "GET /v1/jobs/{job_id}: no responses",
        "#/components/schemas/Nowhere does not resolve",
    ]
