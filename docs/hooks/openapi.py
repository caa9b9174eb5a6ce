"""MkDocs hook: the HTTP API page rendered from the node's own OpenAPI description.

`crawler_node.api.openapi.openapi_document()` is what a node serves at `GET /v1/openapi.json`
and what the tests fuzz live nodes with, so the page cannot drift from the handlers. At build
time this hook replaces the marker `<!-- openapi -->` in api.md with each path, its methods,
parameters, request bodies and responses, and the named schemas, as plain Markdown: no
JavaScript viewer, nothing fetched, so the site builds and reads offline.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- openapi -->"
PAGE = "api.md"
METHODS = ("get", "post", "put", "patch", "delete")  # HEAD twins are said in one line, not repeated

Schema = dict[str, Any]


def on_config(config: Any) -> Any:
    # Import the tree being built, not whichever crawler_node happens to be installed.
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its {MARKER} marker: the API reference has nowhere to go")
    from crawler_node.api.openapi import openapi_document

    return markdown.replace(MARKER, render(openapi_document()))


def render(document: Schema) -> str:
    out: list[str] = []
    info = document.get("info", {})
    if info.get("description"):
        out += [f"OpenAPI {document.get('openapi', '')}: {_cell(info['description'])}", ""]
    schemes = document.get("components", {}).get("securitySchemes", {})
    if schemes:
        out += ["Where the node has a cluster token (`--secret`), a route marked *token* needs one of:", ""]
        for name, scheme in schemes.items():
            how = ("`Authorization: Bearer TOKEN`" if scheme.get("type") == "http"
                   else f"`{scheme.get('name')}: TOKEN`")
            out.append(f"- {how}: {_cell(scheme.get('description', name))}")
        out.append("")
    out += _summary(document["paths"])
    common = _common_answers(document["paths"])
    if common:
        out += ["Any route may also answer:", "", "| status | meaning | body |", "|---|---|---|"]
        out += [f"| {status} | {_cell(answer.get('description', ''))} | {_content(answer)} |"
                for status, answer in sorted(common.items())]
        out.append("")
    for path, item in document["paths"].items():
        out += _path(path, item, common)
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        out += ["### Schemas", ""]
        for name, schema in schemas.items():
            out += [f"#### {name}", "", *_schema_block(schema), ""]
    return "\n".join(out)


def _summary(paths: dict[str, Schema]) -> list[str]:
    rows = ["| route | summary | token |", "|---|---|---|"]
    for path, item in paths.items():
        for method in METHODS:
            if method in item:
                operation = item[method]
                anchor = _anchor(f"{method.upper()} {path}")
                token = "yes" if operation.get("security") else ""
                rows.append(f"| [`{method.upper()} {path}`](#{anchor}) | {_cell(operation.get('summary', ''))} "
                            f"| {token} |")
    return [*rows, ""]


def _operations(paths: dict[str, Schema]) -> list[Schema]:
    return [item[method] for item in paths.values() for method in METHODS if method in item]


def _common_answers(paths: dict[str, Schema]) -> dict[str, Schema]:
    """The answers every operation lists alike (the connection bound, a misdirected request):
    said once at the top instead of under every route."""
    operations = _operations(paths)
    if not operations:
        return {}
    first = operations[0].get("responses", {})
    return {status: answer for status, answer in first.items()
            if all(op.get("responses", {}).get(status) == answer for op in operations[1:])}


def _path(path: str, item: Schema, common: dict[str, Schema]) -> list[str]:
    out: list[str] = []
    shared = item.get("parameters", [])
    for method in METHODS:
        if method not in item:
            continue
        operation = item[method]
        out += [f"### {method.upper()} {path}", "", _cell(operation.get("summary", "")), ""]
        notes = []
        if operation.get("security"):
            notes.append("needs the cluster token where one is set")
        if method == "get" and "head" in item:
            notes.append("`HEAD` answers the same, headers only")
        if notes:
            out += ["*" + "; ".join(notes) + ".*", ""]
        parameters = [*shared, *operation.get("parameters", [])]
        if parameters:
            out += ["| parameter | in | type | |", "|---|---|---|---|"]
            for parameter in parameters:
                name = parameter["name"] + ("" if parameter.get("required") else "?")
                out.append(f"| `{name}` | {parameter['in']} | {_type(parameter.get('schema', {}))} "
                           f"| {_cell(parameter.get('description', ''))} |")
            out.append("")
        body = operation.get("requestBody")
        if body:
            required = "required" if body.get("required") else "optional"
            kinds = ", ".join(f"`{kind}`" for kind in body.get("content", {}))
            line = f"**Request body** ({required}; {kinds})"
            if body.get("description"):
                line += f", {_cell(body['description'])}"
            schemas = [content.get("schema", {}) for content in body.get("content", {}).values()]
            out += [f"{line}: {_type(schemas[0]) if schemas else 'any'}", ""]
        out += ["| status | meaning | body |", "|---|---|---|"]
        for status, answer in sorted(operation.get("responses", {}).items()):
            if common.get(status) == answer:
                continue
            out.append(f"| {status} | {_cell(answer.get('description', ''))} | {_content(answer)} |")
        out.append("")
    return out


def _content(answer: Schema) -> str:
    parts = []
    for kind, content in answer.get("content", {}).items():
        schema = content.get("schema", {})
        parts.append(f"`{kind}`" if kind != "application/json" else _type(schema))
    for header in answer.get("headers", {}):
        parts.append(f"header `{header}`")
    return "; ".join(parts)


def _schema_block(schema: Schema) -> list[str]:
    if schema.get("type") == "object" and "properties" in schema:
        required = set(schema.get("required", []))
        rows = ["| field | type | |", "|---|---|---|"]
        for name, field in schema["properties"].items():
            rows.append(f"| `{name}` | {_type(field)} | {'required' if name in required else 'optional'}"
                        f"{': ' + _cell(field['description']) if field.get('description') else ''} |")
        return rows
    return [_type(schema)]


def _type(schema: Schema, depth: int = 0) -> str:
    """A schema in a few words: a link for a named one, fields inline for a small object."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for key, word in (("oneOf", "one of"), ("anyOf", "any of")):
        if key in schema:
            return f"{word}: " + "; ".join(_type(part, depth) for part in schema[key])
    if "const" in schema:
        return f"`{schema['const']!r}`".replace("True", "true").replace("'", '"')
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        words = f"array of {_type(schema.get('items', {}), depth)}"
        bounds = [f"{schema[k]} {w}" for k, w in (("minItems", "min"), ("maxItems", "max")) if k in schema]
        return words + (f" ({', '.join(bounds)})" if bounds else "")
    if kind == "object" and "properties" in schema:
        if depth >= 2:
            return "object"
        required = set(schema.get("required", []))
        fields = ", ".join(f"{name}{'' if name in required else '?'}: {_type(field, depth + 1)}"
                           for name, field in schema["properties"].items())
        return f"object {{{fields}}}"
    if kind == "object" and "additionalProperties" in schema:
        return f"object of {_type(schema['additionalProperties'], depth + 1)}"
    limits = []
    if "enum" in schema:
        limits.append(" or ".join(f"`{value}`" for value in schema["enum"]))
    for key, word in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"),
                      ("minLength", "length >="), ("maxLength", "length <=")):
        if key in schema:
            limits.append(f"{word} {schema[key]}")
    if "pattern" in schema:
        limits.append(f"matching `{schema['pattern']}`".replace("|", "\\|"))
    return f"{kind} ({', '.join(limits)})" if limits else str(kind)


def _anchor(text: str) -> str:
    """The id MkDocs' toc gives a heading (its default slugify)."""
    import re

    slug = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", slug)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    text = " ".join(str(text).split())
    return text.replace("|", "\\|").replace("*", "\\*").replace("<", "&lt;").replace(">", "&gt;")
