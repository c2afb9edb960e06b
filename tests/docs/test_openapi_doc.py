"""The committed OpenAPI document (docs/reference/openapi.json, rendered on the Scheduler API
page) is the app's own: a changed route or schema fails here until it is regenerated. The page
rendered from it reads as a reference: code as code, types on every parameter and field, a
table of contents of tags, operations and schemas, nothing collapsed."""

import difflib
import importlib.util
import json
import re
import types
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("fastapi", reason="the service's dependencies are not installed")

SCRIPT = Path(__file__).parents[2] / "docs" / "reference" / "gen_openapi.py"


def generator() -> ModuleType:
    """docs/reference/gen_openapi.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("gen_openapi", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_openapi_document_is_the_apps() -> None:
    gen = generator()
    expected = gen.render()
    committed = gen.OPENAPI_JSON.read_text() if gen.OPENAPI_JSON.is_file() else ""
    if committed != expected:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                expected.splitlines(keepends=True),
                "committed",
                "app",
                n=1,
            )
        )
        pytest.fail(
            f"{gen.OPENAPI_JSON} differs from the app's OpenAPI document; regenerate it with\n"
            f"    {gen.REGENERATE}\n{diff[:4000]}"
        )


def test_check_flag_names_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = generator()
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(gen, "OPENAPI_JSON", stale)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0


# The page: docs/hooks/openapi_page.py renders the document as Markdown, which the site's
# Markdown extensions turn into the Scheduler API page.

HOOK = Path(__file__).parents[2] / "docs" / "hooks" / "openapi_page.py"
PAGE = Path(__file__).parents[2] / "docs" / "reference" / "scheduler-api.md"


def page_hook() -> ModuleType:
    """docs/hooks/openapi_page.py as a module (MkDocs loads hooks by path too)."""
    pytest.importorskip("griffe", reason="the docs' dependencies are not installed (.[docs])")
    spec = importlib.util.spec_from_file_location("openapi_page", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def document() -> dict:
    return json.loads(generator().OPENAPI_JSON.read_text())


@pytest.fixture(scope="module")
def page(document: dict) -> tuple[str, list[dict]]:
    """The reference as HTML, with the table of contents, by the site's extensions."""
    markdown = pytest.importorskip("markdown", reason="the docs' dependencies are not installed")
    converter = markdown.Markdown(extensions=["tables", "attr_list", "toc"])
    html = converter.convert(page_hook().render(document))
    return html, converter.toc_tokens


def visible_text(html: str) -> str:
    """The page's text outside code: what a reader sees as prose."""
    return re.sub(r"<code>.*?</code>|<[^>]+>", "", html, flags=re.DOTALL)


def test_code_spans_render_as_code_not_backticks(page: tuple[str, list[dict]]) -> None:
    html, _ = page
    text = visible_text(html)
    assert "`" not in text, text[max(0, text.find("`") - 200) : text.find("`") + 200]
    assert "<code>next_cursor</code>" in html  # the docstring's ``next_cursor``, in a table cell


def test_double_backticks_roles_and_angle_brackets_in_cells() -> None:
    parameter = {
        "name": "cursor",
        "in": "query",
        "schema": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "description": "the previous page's ``next_cursor`` (see :class:`~a.b.NodesPublic`);\n"
        "a `Bearer <token>` or Bearer <token> | none",
    }
    document = {"paths": {"/v1/x": {"get": {"tags": ["x"], "parameters": [parameter]}}}}
    markdown = pytest.importorskip("markdown", reason="the docs' dependencies are not installed")
    html = markdown.markdown(page_hook().render(document), extensions=["tables", "attr_list"])
    row = re.findall(r"<tr>(.*?)</tr>", html, flags=re.DOTALL)[1]
    assert "<code>next_cursor</code>" in row and "<code>NodesPublic</code>" in row
    assert "<code>Bearer &lt;token&gt;</code> or Bearer &lt;token&gt; | none" in row
    assert "`" not in visible_text(html)


def test_table_of_contents_lists_tags_operations_and_schemas(
    page: tuple[str, list[dict]], document: dict
) -> None:
    _, toc = page
    by_tag: dict[str, list[str]] = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            by_tag.setdefault(operation["tags"][0], []).append(f"{method.upper()} {path}")
    assert [entry["name"] for entry in toc] == [tag.capitalize() for tag in by_tag] + ["Schemas"]
    for entry, operations in zip(toc, by_tag.values(), strict=False):
        assert [child["name"] for child in entry["children"]] == operations
    assert [child["name"] for child in toc[-1]["children"]] == list(
        document["components"]["schemas"]
    )


def test_optional_parameters_and_fields_show_their_types(page: tuple[str, list[dict]]) -> None:
    html, _ = page
    rows = re.findall(r"<tr>(.*?)</tr>", html, flags=re.DOTALL)
    cursor = next(row for row in rows if "<td><code>cursor</code></td>" in row)
    assert "<code>string</code>" in cursor and "<code>null</code>" in cursor
    until = next(row for row in rows if "<td><code>until</code></td>" in row)
    assert "<code>string</code> (date-time) | <code>null</code>" in until


def test_schema_fields_carry_their_attributes_description(page: tuple[str, list[dict]]) -> None:
    html, _ = page
    rows = re.findall(r"<tr>(.*?)</tr>", html, flags=re.DOTALL)
    grace = next(row for row in rows if "<td><code>grace_s</code></td>" in row)
    assert "seconds the holding job has to release the node" in grace
    assert "Attributes:" not in visible_text(html)


def test_nothing_is_collapsed_or_nested_in_raw_html(page: tuple[str, list[dict]]) -> None:
    html, _ = page
    assert "<details" not in html and "??? " not in html
    assert "<h1" not in html  # the page's own title is its only h1


@pytest.mark.parametrize(
    ("schema", "shown"),
    [
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "`string` \\| `null`"),
        ({"type": ["integer", "null"], "minimum": 1}, "`integer` (≥ 1) \\| `null`"),
        (
            {"type": "array", "items": {"$ref": "#/components/schemas/JobPublic"}},
            "array[[JobPublic](#schema-jobpublic)]",
        ),
        ({"type": "string", "enum": ["idle", "busy"]}, "`string` (one of `idle`, `busy`)"),
        ({"type": "string", "const": "auto"}, '`"auto"`'),
        ({}, "any"),
    ],
)
def test_types_read_as_unions_arrays_and_links(schema: dict, shown: str) -> None:
    assert page_hook().type_of(schema) == shown


def test_the_page_marker_is_replaced_by_the_reference() -> None:
    hook = page_hook()
    source = PAGE.read_text()
    assert hook.MARKER.search(source), "scheduler-api.md lost its <!-- openapi: ... --> line"
    file = types.SimpleNamespace(abs_src_path=str(PAGE))
    rendered = hook.on_page_markdown(source, page=types.SimpleNamespace(file=file))
    assert not hook.MARKER.search(rendered)
    assert '### <span class="http-method http-post">POST</span> `/v1/nodes/events`' in rendered
