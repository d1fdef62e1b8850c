"""Linear-time patterns: what tenants write (a static tool's ``matches`` regex, a resource's URI template, the
``pattern`` and ``patternProperties`` of a tool's JSON Schema; or one synced from an upstream) is matched by RE2
(``google-re2``), never by Python's backtracking ``re`` on the event loop (why, measured: docs/robustness.md).

- ``compile_regex(source)``: the RE2 pattern, cached; ``ValueError`` when RE2 refuses it (invalid, or without a
  linear-time guarantee: backreferences, lookaround). ``\\d``, ``\\w`` and ``\\s`` are ASCII only.
- ``regex_search(source, text)``: whether ``text`` contains a match.
- ``UriTemplate(template).match(uri)``: the variables of a URI that matches a simple RFC 6570 template whole
  (``{var}`` is one path segment), else ``None``.
- ``schema_validator(schema)``: a JSON Schema 2020-12 validator whose regexes match with RE2;
  ``check_schema_patterns(schema)``: ``ValueError`` for a schema it could not check in linear time.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any, cast

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

__all__ = ["PLACEHOLDER", "UriTemplate", "check_schema_patterns", "compile_regex", "regex_search", "schema_validator"]

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")  # a URI template's or a static prompt's ``{name}``
_CACHED = 1024  # distinct tenant regexes kept compiled per process
_MAX_MEM = 8 << 20  # RE2's default memory budget of one compiled pattern (bytes): bigger ones are refused


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the tenant's ValueError, not a line on stderr
    options.max_mem = _MAX_MEM
    return options


def compile_regex(source: Any) -> Any:
    """The RE2 pattern of ``source``; ``ValueError`` when it is not valid RE2 syntax (see the docstring)."""
    if not isinstance(source, str):
        raise ValueError("a regular expression is a string")
    return _compiled(source)


@functools.lru_cache(maxsize=_CACHED)
def _compiled(source: str) -> Any:
    try:
        return re2.compile(source, options=_options())
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"{detail} (patterns are RE2: no backreferences or lookaround)") from exc


def regex_search(source: str, text: str) -> bool:
    return compile_regex(source).search(text) is not None


class UriTemplate:
    """A compiled URI template (see the docstring)."""

    __slots__ = ("_pattern", "template")

    def __init__(self, template: str) -> None:
        self.template = template
        parts: list[str] = []
        named: set[str] = set()
        position = 0
        for found in PLACEHOLDER.finditer(template):
            parts.append(re2.escape(template[position : found.start()]))
            name = found.group(1)
            parts.append(f"(?P<{name}>[^/?#]+)" if name not in named else "[^/?#]+")
            named.add(name)
            position = found.end()
        parts.append(re2.escape(template[position:]))
        self._pattern = compile_regex("".join(parts))

    def match(self, uri: str) -> dict[str, str] | None:
        found = self._pattern.fullmatch(uri)
        if found is None:
            return None
        return {name: str(value) for name, value in found.groupdict().items()}


def _searches(pattern: str, text: str) -> bool | None:
    """Whether ``text`` contains a match; ``None`` when RE2 cannot run ``pattern`` (a row saved before the check)."""
    try:
        return regex_search(pattern, text)
    except ValueError:
        return None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _searches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _searches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = sorted(key for key in instance if key not in known and not any(_searches(p, key) for p in patterns))
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif extra is False and extras:  # jsonschema's messages
        joined = ", ".join(map(repr, extras))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            listed = ", ".join(map(repr, sorted(patterns)))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({joined} {verb} unexpected)")


_Validator = validators.extend(
    Draft202012Validator,
    {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties},
)


def schema_validator(schema: Any) -> Draft202012Validator:
    """The validator of a tool's JSON Schema, its regexes matched by RE2 (see the docstring)."""
    return cast(Draft202012Validator, _Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER))


_DATA = frozenset({"const", "enum", "default", "examples"})  # values, not subschemas: never read as keywords


def check_schema_patterns(schema: Any) -> None:
    """``ValueError`` unless the schema's regexes are RE2 and it keeps ``unevaluatedProperties`` away from
    ``patternProperties`` (see the docstring)."""
    seen: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        if isinstance(node.get("pattern"), str):
            compile_regex(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            seen.add("patternProperties")
            for pattern in node["patternProperties"]:
                compile_regex(pattern)
        if "unevaluatedProperties" in node:
            seen.add("unevaluatedProperties")
        for key, value in node.items():
            if key not in _DATA:
                walk(value)

    walk(schema)
    if seen == {"patternProperties", "unevaluatedProperties"}:
        raise ValueError("a schema may not use unevaluatedProperties together with patternProperties")
