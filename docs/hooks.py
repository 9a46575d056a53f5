"""mkdocs hooks: the pages whose facts live in the code are written from the code.

A page holds a marker comment, which the build replaces:

    <!-- htgrid:openapi -->       the schedd's OpenAPI document (its app's), rendered
    <!-- htgrid:knobs -->         htgrid.pool.KNOBS: every knob of htgrid.conf, its default
    <!-- htgrid:commands -->      `htgrid COMMAND --help` of every command
    <!-- htgrid:include PATH -->  a file of the repository (bench/README.md)

so the documentation says what this checkout does. mkdocs.yml names this file (`hooks:`);
it is no page (`exclude_docs`).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_MARKER = re.compile(r"<!-- htgrid:(\w+)(?: ([^ ]+))? -->")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each marker of the page by what it names."""
    return _MARKER.sub(lambda m: _render(m.group(1), m.group(2)), markdown)


def _render(kind: str, argument: str | None) -> str:
    if kind == "openapi":
        from htgrid.net.app import published_document  # what the schedd serves

        return openapi_markdown(published_document())
    if kind == "knobs":
        return knobs_markdown()
    if kind == "commands":
        return commands_markdown()
    if kind == "include" and argument:
        text = (ROOT / argument).read_text()
        return re.sub(r"\A# .*\n", "", text)  # the page has its own title
    raise ValueError(f"unknown marker htgrid:{kind}")


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#schema-{name.lower()})"
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    return f"`{schema.get('type', 'object')}`"


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def openapi_markdown(doc: dict[str, Any]) -> str:
    """The operations of an OpenAPI 3 document, then its schemas, as Markdown."""
    out = [_cell(doc["info"].get("description", "")), ""]
    out += ["| method | path | what |", "|---|---|---|"]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            anchor = f"#op-{op['operationId']}"
            out.append(f"| `{method.upper()}` | [`{path}`]({anchor}) | {_cell(op['summary'])} |")
    out.append("")
    for path, item in doc["paths"].items():
        for method, op in item.items():
            out += [f"### `{method.upper()} {path}` {{#op-{op['operationId']}}}", ""]
            out += [_cell(op["summary"]), ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | type | what |", "|---|---|---|---|"]
                for p in params:
                    kind = _schema_name(p.get("schema", {}))
                    what = _cell(p.get("description", ""))
                    out.append(f"| `{p['name']}` | {p['in']} | {kind} | {what} |")
                out.append("")
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                out.append(f"Request body (`{media}`): {_schema_name(content['schema'])}  ")
            if body:
                out.append("")
            out += ["| status | what | body |", "|---|---|---|"]
            for status, response in op["responses"].items():
                bodies = ", ".join(
                    f"`{media}` {_schema_name(c.get('schema', {}))}"
                    for media, c in response.get("content", {}).items()
                )
                out.append(f"| {status} | {_cell(response['description'])} | {bodies} |")
            out.append("")
    out += ["## Schemas", ""]
    for name, schema in doc["components"]["schemas"].items():
        out += [f"### `{name}` {{#schema-{name.lower()}}}", ""]
        if schema.get("description"):
            out += [_cell(schema["description"]), ""]
        props = schema.get("properties", {})
        if props:
            out += ["| field | type | what |", "|---|---|---|"]
            for field, sub in props.items():
                what = _cell(sub.get("description", ""))
                out.append(f"| `{field}` | {_schema_name(sub)} | {what} |")
            out.append("")
        else:
            out += ["```json", json.dumps(schema, indent=2), "```", ""]
    return "\n".join(out)


def knobs_markdown() -> str:
    """Every knob `htgrid.conf` takes, with its default (`htgrid config_val -dump`)."""
    from htgrid.pool import KNOBS  # the checkout being documented

    out = ["| knob | default |", "|---|---|"]
    for name, default in sorted(KNOBS.items()):
        shown = f"`{default}`" if default else ("(empty)" if default == "" else "(computed)")
        out.append(f"| `{name}` | {shown} |")
    return "\n".join(out)


def commands_markdown() -> str:
    """`htgrid --help`, then each command's and verb's --help."""
    from htgrid.cli import build_parser

    parser = build_parser()
    out = ["```text", _help(parser), "```", ""]

    def walk(sub_parser: Any, words: tuple[str, ...]) -> None:
        for name, sub in sub_parser.subcommands().items():
            path = (*words, name)
            out.extend([f"## `htgrid {' '.join(path)}`", "", "```text", _help(sub), "```", ""])
            walk(sub, path)

    walk(parser, ())
    return "\n".join(out)


def _help(parser: Any) -> str:
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        parser.print_help()
    return text.getvalue().rstrip()
