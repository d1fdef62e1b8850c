"""Static tools: hosted mocks whose answers are configured, not coded.

``validate_static_config`` checks a configuration (``ValueError`` with a sentence for the user).
``StaticBehaviour`` is a resolved tool: ``choose`` picks the answer of the first case that matches the arguments,
else the tool's own result or error; ``answer`` first waits and reports progress as configured. The
configuration (cases, conditions, delay, progress): docs/static-tools.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..protocol.errors import ProtocolError
from .context import CONTENT_BLOCK_FIELDS
from .patterns import compile_regex, regex_search

_PREDICATES = ("equals", "contains", "matches", "exists")
_MISSING = object()
MAX_DELAY_MS = 10 * 60 * 1000
MAX_PROGRESS_STEPS = 1000


def _validate_error(error: Any) -> None:
    if not isinstance(error, dict):
        raise ValueError("A static error must be an object {code, message, data?}.")
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        raise ValueError("A static error needs an integer code.")
    if not isinstance(error.get("message"), str):
        raise ValueError("A static error needs a message string.")


def _validate_result(result: Any) -> None:
    if not isinstance(result, dict):
        raise ValueError("A static result must be a CallToolResult object.")
    content = result.get("content", [])
    if not isinstance(content, list) or not all(
        isinstance(block, dict) and block.get("type") in CONTENT_BLOCK_FIELDS for block in content
    ):
        raise ValueError("A static result's content must be a list of content blocks with a known type.")
    if "isError" in result and not isinstance(result["isError"], bool):
        raise ValueError("isError must be true or false.")


def _validate_answer(result: Any, error: Any, where: str) -> None:
    if (result is None) == (error is None):
        raise ValueError(f"{where} needs exactly one of a result or an error.")
    if error is not None:
        _validate_error(error)
    else:
        _validate_result(result)


def _validate_case(case: Any, index: int) -> None:
    where = f"Case {index + 1}"
    if not isinstance(case, dict):
        raise ValueError(f"{where} must be an object.")
    unknown = set(case) - {"equals", "contains", "pointer", "result", "error"}
    if unknown:
        raise ValueError(f"{where} has unknown keys: {', '.join(sorted(unknown))}.")
    for key in ("equals", "contains"):
        if key in case and not isinstance(case[key], dict):
            raise ValueError(f"{where}: {key!r} maps argument names to values.")
    conditions = case.get("pointer", [])
    if not isinstance(conditions, list):
        raise ValueError(f"{where}: 'pointer' is a list of conditions.")
    for condition in conditions:
        if not isinstance(condition, dict) or not isinstance(condition.get("pointer"), str):
            raise ValueError(f"{where}: each pointer condition needs a 'pointer' string.")
        if condition["pointer"] and not condition["pointer"].startswith("/"):
            raise ValueError(f"{where}: JSON pointers start with '/'.")
        predicates = [key for key in _PREDICATES if key in condition]
        if len(predicates) != 1:
            raise ValueError(f"{where}: each pointer condition needs exactly one of {', '.join(_PREDICATES)}.")
        if "matches" in condition:
            try:
                compile_regex(condition["matches"])
            except ValueError as exc:
                raise ValueError(f"{where}: invalid regular expression: {exc}") from exc
    if not any(key in case for key in ("equals", "contains", "pointer")):
        raise ValueError(f"{where} has no condition; put an unconditional answer in the tool's result or error.")
    _validate_answer(case.get("result"), case.get("error"), where)


def validate_static_config(
    result: Any, error: Any, cases: Any = (), delay_ms: int = 0, progress_steps: int = 0
) -> None:
    """Raise ``ValueError`` unless the configuration is a well-formed static tool."""
    _validate_answer(result, error, "A static tool")
    if not isinstance(cases, list | tuple):
        raise ValueError("Static cases must be a list.")
    for index, case in enumerate(cases):
        _validate_case(case, index)
    if not 0 <= delay_ms <= MAX_DELAY_MS:
        raise ValueError("The static delay must be between 0 and 600000 ms.")
    if not 0 <= progress_steps <= MAX_PROGRESS_STEPS:
        raise ValueError(f"Static progress steps must be between 0 and {MAX_PROGRESS_STEPS}.")


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at an RFC 6901 JSON pointer, or ``_MISSING``."""
    if pointer == "":
        return document
    current = document
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            return _MISSING
    return current


def _contains(value: Any, expected: Any) -> bool:
    if isinstance(value, str) and isinstance(expected, str):
        return expected in value
    if isinstance(value, list):
        return expected in value
    return False


def _holds(value: Any, condition: dict[str, Any]) -> bool:
    if "exists" in condition:
        return (value is not _MISSING) == bool(condition["exists"])
    if value is _MISSING:
        return False
    if "equals" in condition:
        return bool(value == condition["equals"])
    if "contains" in condition:
        return _contains(value, condition["contains"])
    return isinstance(value, str) and regex_search(condition["matches"], value)


def case_matches(case: dict[str, Any], arguments: dict[str, Any]) -> bool:
    return (
        all(arguments.get(name, _MISSING) == expected for name, expected in case.get("equals", {}).items())
        and all(_contains(arguments.get(name), expected) for name, expected in case.get("contains", {}).items())
        and all(_holds(resolve_pointer(arguments, c["pointer"]), c) for c in case.get("pointer", []))
    )


@dataclass(frozen=True)
class StaticBehaviour:
    result: Any
    error: Any
    cases: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    delay_ms: int = 0
    progress_steps: int = 0

    def choose(self, arguments: dict[str, Any]) -> tuple[Any, Any]:
        for case in self.cases:
            if case_matches(case, arguments):
                return case.get("result"), case.get("error")
        return self.result, self.error

    async def answer(
        self, arguments: dict[str, Any], report: Callable[[float, float | None, str | None], Awaitable[None]]
    ) -> dict[str, Any]:
        """Wait and report progress as configured, then answer (or raise the configured error)."""
        steps = self.progress_steps
        pause = self.delay_ms / 1000 / steps if steps else self.delay_ms / 1000
        for step in range(1, steps + 1):
            if pause:
                await asyncio.sleep(pause)
            await report(step, steps, None)
        if not steps and pause:
            await asyncio.sleep(pause)
        return static_answer(*self.choose(arguments))


def static_answer(result: Any, error: Any) -> dict[str, Any]:
    """The result to return, or raise the configured error as a ``ProtocolError``."""
    if error is not None:
        raise ProtocolError(error["message"], error.get("data"), code=error["code"])
    answer = dict(result)
    answer.setdefault("content", [])
    return answer
