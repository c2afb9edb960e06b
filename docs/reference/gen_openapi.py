"""Write the service's OpenAPI document to docs/reference/openapi.json, from which the
Scheduler API page (scheduler-api.md) is rendered.

    python docs/reference/gen_openapi.py          # rewrite the committed document
    python docs/reference/gen_openapi.py --check  # exit 1 when it is out of date

Run it after changing a route or a schema; tests/docs/test_openapi_doc.py fails until the
committed document equals the app's.
"""

import json
import sys
import typing
from pathlib import Path

OPENAPI_JSON = Path(__file__).with_name("openapi.json")
"""The committed document, beside this script."""
REGENERATE = "python docs/reference/gen_openapi.py"
"""The command that rewrites :data:`OPENAPI_JSON` (run from the checkout's root)."""


def render() -> str:
    """The app's OpenAPI document as committed: JSON, 2-space indents, the app's key order,
    a final newline. No database is opened: the document does not depend on the settings."""
    from interstice.api.main import create_app

    # The settings class as create_app declares it, wherever it lives: Settings | None.
    settings_class = next(
        kind
        for kind in typing.get_args(typing.get_type_hints(create_app)["settings"])
        if kind is not type(None)
    )
    document = create_app(settings_class(db_url="sqlite://")).openapi()
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if OPENAPI_JSON.is_file() and OPENAPI_JSON.read_text() == text:
            return 0
        print(f"{OPENAPI_JSON} is out of date: run {REGENERATE}", file=sys.stderr)
        return 1
    OPENAPI_JSON.write_text(text)
    print(f"wrote {OPENAPI_JSON}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
