"""MkDocs hook: the Scheduler API page's reference, rendered from the committed OpenAPI
document as Markdown headings and tables.

A page puts ``<!-- openapi: openapi.json -->`` (a path relative to the page) on a line of its
own; the hook replaces it with one ``##`` section per tag (the document's order), one ``###``
heading per operation (method and path, so the page's table of contents lists them), and a
``## Schemas`` section with one table per schema. Everything is Markdown the page's own
extensions render: the descriptions' code spans (double backticks as the docstrings write
them, or single) print as code, a Sphinx role prints as code (see sphinx_roles.py), and
tables are Markdown tables, whose cells are Markdown too.

The schemas document their fields in Google-style ``Attributes:`` sections (the pydantic
models' docstrings); griffe's docstring parser splits them out, so each field's row carries
its own description. Types read as Python's: ``anyOf`` is ``string | null``, an array
``array[JobPublic]``, with bounds (``≥ 1, ≤ 10000``) and enumerations beside them.
"""

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import griffe
from mkdocs.structure.pages import Page

MARKER = re.compile(r"^<!-- openapi: (\S+) -->$", re.MULTILINE)
"""The line a page puts where the reference goes: the document's path, relative to the page."""
SCHEMA_PREFIX = "#/components/schemas/"

Schema = dict[str, Any]


def _load_sphinx_roles():
    """docs/hooks/sphinx_roles.py, beside this file (hooks are loaded by path, not as a
    package, so a plain import would not find it)."""
    spec = importlib.util.spec_from_file_location(
        "sphinx_roles", Path(__file__).with_name("sphinx_roles.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_sphinx_roles = _load_sphinx_roles()
CODE_SPAN = re.compile(r"(`+).*?\1", re.DOTALL)
"""A Markdown code span, of one or more backticks (the docstrings use both)."""


def _outside_code(markdown: str, change) -> str:
    """``markdown`` with ``change`` applied to the text between its code spans."""
    out, start = [], 0
    for span in CODE_SPAN.finditer(markdown):
        out += [change(markdown[start : span.start()]), span.group(0)]
        start = span.end()
    return "".join(out) + change(markdown[start:])


def text(description: str) -> str:
    """A description as Markdown: Sphinx roles as code, ``<`` outside code escaped (so
    ``Bearer <token>`` is text, not an HTML tag)."""
    return _outside_code(_sphinx_roles.plain(description), lambda s: s.replace("<", "&lt;"))


def cell(description: str) -> str:
    """A description in one table cell: lines joined, paragraphs split by ``<br>``, pipes
    outside code escaped (a pipe inside a code span does not split a Markdown table's row)."""
    paragraphs = [" ".join(p.split()) for p in text(description).split("\n\n")]
    joined = "<br><br>".join(p for p in paragraphs if p)
    return _outside_code(joined, lambda s: s.replace("|", "\\|"))


def schema_anchor(name: str) -> str:
    """The id of a schema's heading, e.g. ``schema-jobcreate``."""
    return "schema-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def operation_anchor(method: str, path: str) -> str:
    """The id of an operation's heading, e.g. ``get-v1-jobs-job_id``."""
    return re.sub(r"[^a-z0-9_]+", "-", f"{method} {path}".lower()).strip("-")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def bounds(schema: Schema) -> list[str]:
    """A schema's numeric, length and size limits, e.g. ``["≥ 1", "≤ 10000"]``."""
    found = []
    for key, sign in (
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
    ):
        if key in schema:
            found.append(f"{sign} {_number(schema[key])}")
    for low, high, unit in (
        ("minLength", "maxLength", "characters"),
        ("minItems", "maxItems", "items"),
        ("minProperties", "maxProperties", "entries"),
    ):
        if low in schema and high in schema:
            found.append(f"{schema[low]} to {schema[high]} {unit}")
        elif high in schema:
            found.append(f"at most {schema[high]} {unit}")
        elif low in schema and schema[low] > 0:
            found.append(f"at least {schema[low]} {unit}")
    return found


def type_of(schema: Schema) -> str:
    """A schema's type as Markdown, e.g. ```string` \\| `null```, ``array[[Job](#...)]``;
    bounds and enumerations in parentheses. Pipes are escaped for a table cell."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(SCHEMA_PREFIX)
        return f"[{name}](#{schema_anchor(name)})"
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return " \\| ".join(type_of(option) for option in schema[union])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type")
    if isinstance(kind, list):  # OpenAPI 3.1: "type": ["string", "null"]
        return " \\| ".join(
            "`null`" if one == "null" else type_of({**schema, "type": one}) for one in kind
        )
    if kind is None:
        return "any"
    if kind == "array":
        shown = f"array[{type_of(schema.get('items', {}))}]"
    elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        shown = f"object[string, {type_of(schema['additionalProperties'])}]"
    else:
        shown = f"`{kind}`" + (f" ({schema['format']})" if "format" in schema else "")
    notes = bounds(schema)
    if "enum" in schema:
        notes.insert(0, "one of " + ", ".join(f"`{value}`" for value in schema["enum"]))
    return shown + (f" ({'; '.join(notes)})" if notes else "")


def default_of(schema: Schema) -> str:
    """A default value as a code span, or an empty cell."""
    return f"`{json.dumps(schema['default'])}`" if "default" in schema else ""


def split_docstring(description: str) -> tuple[str, dict[str, str]]:
    """A schema's description as its text and its ``Attributes:`` entries by name."""
    sections = griffe.Docstring(description).parse("google")
    prose, fields = [], {}
    for section in sections:
        if section.kind is griffe.DocstringSectionKind.attributes:
            fields.update({item.name: item.description for item in section.value})
        elif section.kind is griffe.DocstringSectionKind.text:
            prose.append(section.value)
    return "\n\n".join(prose), fields


def body_of(media_type: str, media: Schema) -> str:
    """A request's or response's body: its schema, after its media type unless JSON."""
    shown = type_of(media.get("schema", {}))
    return shown if media_type == "application/json" else f"`{media_type}`: {shown}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def render_operation(method: str, path: str, operation: Schema) -> list[str]:
    """One operation: heading, description, roles, parameters, request body, responses."""
    badge = f'<span class="http-method http-{method}">{method.upper()}</span>'
    lines = [f"### {badge} `{path}` {{ #{operation_anchor(method, path)} }}", ""]
    if operation.get("summary"):
        lines += [f"**{operation['summary']}**", ""]
    if operation.get("description"):
        lines += [text(operation["description"]), ""]
    if operation.get("security"):
        roles = ", ".join(f"`{role}`" for role in operation.get("x-roles", []))
        lines += [f"Token roles: {roles or 'any'}.", ""]
    else:
        lines += ["No token.", ""]

    parameters = operation.get("parameters", [])
    if parameters:
        rows = [
            [
                f"`{p['name']}`",
                p["in"],
                type_of(p.get("schema", {})),
                "yes" if p.get("required") else "no",
                default_of(p.get("schema", {})),
                cell(p.get("description", "")),
            ]
            for p in parameters
        ]
        lines += ["**Parameters**", ""]
        lines += table(["Name", "In", "Type", "Required", "Default", "Description"], rows)

    body = operation.get("requestBody")
    if body:
        kinds = [body_of(kind, media) for kind, media in body["content"].items()]
        need = "required" if body.get("required") else "optional"
        lines += [f"**Request body** ({need}): {', '.join(kinds)}", ""]

    rows = []
    for code, answer in sorted(operation.get("responses", {}).items()):
        content = answer.get("content", {})
        shown = ", ".join(body_of(kind, media) for kind, media in content.items())
        rows.append([f"`{code}`", cell(answer.get("description", "")), shown])
    if rows:
        lines += ["**Responses**", ""]
        lines += table(["Status", "Meaning", "Body"], rows)
    return lines


def render_schema(name: str, schema: Schema) -> list[str]:
    """One schema: heading, its docstring's text, a row per field."""
    prose, documented = split_docstring(schema.get("description", ""))
    lines = [f"### {name} {{ #{schema_anchor(name)} }}", ""]
    if prose:
        lines += [text(prose), ""]
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    if properties:
        rows = [
            [
                f"`{field}`",
                type_of(field_schema),
                "yes" if field in required else "no",
                default_of(field_schema),
                cell(field_schema.get("description") or documented.get(field, "")),
            ]
            for field, field_schema in properties.items()
        ]
        lines += table(["Field", "Type", "Required", "Default", "Description"], rows)
    elif schema.get("type") or "enum" in schema:
        lines += [f"Type: {type_of(schema)}", ""]
    return lines


def render(document: Schema) -> str:
    """The whole reference as Markdown: the operations by tag, then the schemas."""
    by_tag: dict[str, list[tuple[str, str, Schema]]] = {}
    for path, item in document.get("paths", {}).items():
        for method, operation in item.items():
            tag = (operation.get("tags") or ["other"])[0]
            by_tag.setdefault(tag, []).append((method, path, operation))
    lines: list[str] = []
    for tag, operations in by_tag.items():
        lines += [f"## {tag.capitalize()} {{ #tag-{tag} }}", ""]
        for method, path, operation in operations:
            lines += render_operation(method, path, operation)
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", ""]
        for name, schema in schemas.items():
            lines += render_schema(name, schema)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    def replace(match: re.Match[str]) -> str:
        source = Path(page.file.abs_src_path).parent / match.group(1)
        return render(json.loads(source.read_text()))

    return MARKER.sub(replace, markdown)
