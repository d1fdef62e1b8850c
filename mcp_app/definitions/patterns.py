"""Linear-time patterns: what tenants write (a static tool's ``matches`` regex, a resource's URI template, one
synced from an upstream) is matched by RE2 (``google-re2``), whose time grows linearly with the text, never by
Python's backtracking ``re`` on the event loop (docs/robustness.md: ``^(a+)+$`` against 24 ``a``s and ``!`` took
0.6 s in ``re``, doubling per character; a template with eight adjacent variables 0.4 s at 36 characters).

The contract:

- ``compile_regex(source)``: the RE2 pattern of a tenant's regex, cached; ``ValueError`` when RE2 refuses it
  (invalid, or a feature without a linear-time guarantee: backreferences, lookaround, possessive or atomic
  groups). Semantics otherwise as ``re`` (Perl syntax, leftmost-first), except that ``\\d``, ``\\w`` and ``\\s``
  are ASCII only.
- ``regex_search(source, text)``: whether ``text`` contains a match (the pattern was validated at save).
- ``UriTemplate(template)``: a simple RFC 6570 template (``{var}`` expands to one path segment, ``[^/?#]+``);
  ``.match(uri)`` gives the variables of a URI that matches it whole, else ``None``. A variable named twice
  matches any segment its second time, and keeps its first value.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import re2

__all__ = ["UriTemplate", "compile_regex", "regex_search"]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
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
        for found in _PLACEHOLDER.finditer(template):
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
