"""gpubw's machine-readable outputs: their names, ``schema_version`` values and JSON
Schemas (draft 2020-12, in ``gpubw/schemas/``, shipped in the package and linked from the
repository's ``schemas/``).

Every JSON document gpubw prints carries ``schema_version``; docs/compatibility.md says what
a version may change. A consumer must ignore members it does not know, so the schemas of
outputs leave objects open (new optional members are allowed). gpubw holds its own output
to more: an object marked ``"x-gpubw-closed": true`` has only the members the schema names
when gpubw writes it (:func:`errors` with ``closed=True``), so a member gpubw adds without
describing it is caught before a report is written. Expectations files are gpubw's input,
not its output: their schema stays closed (a misspelt key is an error, never ignored).

Standard library only at import time (``gpubw -l`` imports the version constants).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any

REPORT, LIST, INFO, CHECK, COMPARE, EXPECT = "report", "list", "info", "check", "compare", "expect"
FLEET = "fleet"
#: the current schema_version of each output (a string: "1"; a breaking change makes "2")
LIST_VERSION = "1"
VERSIONS = {
    REPORT: "1",
    LIST: LIST_VERSION,
    INFO: "1",
    CHECK: "1",
    COMPARE: "1",
    EXPECT: "1",
    FLEET: "1",
}
#: the marker of an object gpubw writes with only the members its schema names
CLOSED = "x-gpubw-closed"


def schema_file(name: str) -> str:
    """The file name of output ``name``'s schema in ``gpubw/schemas/``."""
    return f"{name}-v{VERSIONS[name]}.schema.json"


_cache: dict[str, dict[str, Any]] = {}
_validators: dict[tuple[str, bool], Any] = {}


def schema(name: str) -> dict[str, Any]:
    """Output ``name``'s schema, from the installed package."""
    if name not in _cache:
        import json
        from importlib import resources

        folder = resources.files("gpubw").joinpath("schemas")
        _cache[name] = json.loads(folder.joinpath(schema_file(name)).read_text("utf-8"))
    return _cache[name]


def closed_schema(node: Any) -> Any:
    """A copy of a schema in which every object marked :data:`CLOSED` takes no other
    members (``additionalProperties: false``)."""
    if isinstance(node, list):
        return [closed_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: closed_schema(v) for k, v in node.items()}
    if out.pop(CLOSED, False):
        out["additionalProperties"] = False
    return out


def validator(name: str, *, closed_objects: bool = False, ref: str = "") -> Any:
    """A jsonschema validator of output ``name`` (of its ``$defs`` entry ``ref`` if
    given), holding marked objects closed when ``closed_objects``."""
    key = (f"{name}#{ref}", closed_objects)
    if key not in _validators:
        import jsonschema

        doc = schema(name)
        if ref:
            doc = {"$defs": doc["$defs"], "$ref": f"#/$defs/{ref}"}
        _validators[key] = jsonschema.Draft202012Validator(
            closed_schema(doc) if closed_objects else doc
        )
    return _validators[key]


def where(path: Any, root: str = "$") -> str:
    """A JSON path in the ``$.a[0].b`` form."""
    return root + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def errors(name: str, doc: Any, *, closed: bool = False) -> list[str]:
    """Readable violations of output ``name``'s schema (``$.path: message``), in document
    order; ``closed``: as gpubw holds its own output (see the module's docstring)."""
    found = validator(name, closed_objects=closed).iter_errors(doc)
    return [f"{where(e.path)}: {e.message}" for e in sorted(found, key=lambda e: list(e.path))]
