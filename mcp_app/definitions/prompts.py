"""Prompt and resource catalog helpers: validation of configured arguments, messages and URI templates, and
rendering of static prompts. Pure functions, shared by the models, the upstream sync and the executors."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from .context import CONTENT_BLOCK_FIELDS
from .patterns import PLACEHOLDER

_ROLES = {"user", "assistant"}


def validate_prompt_arguments(arguments: Any) -> None:
    if not isinstance(arguments, list):
        raise ValueError("Prompt arguments must be a list of {name, description?, required?}.")
    seen = set()
    for argument in arguments:
        if not isinstance(argument, dict) or not isinstance(argument.get("name"), str) or not argument["name"]:
            raise ValueError("Each prompt argument needs a name.")
        if argument["name"] in seen:
            raise ValueError(f"Prompt argument {argument['name']!r} is listed twice.")
        seen.add(argument["name"])
        if "required" in argument and not isinstance(argument["required"], bool):
            raise ValueError("A prompt argument's 'required' must be true or false.")
        completions = argument.get("completions")
        if completions is not None and not (
            isinstance(completions, list) and all(isinstance(item, str) for item in completions)
        ):
            raise ValueError("A prompt argument's 'completions' must be a list of strings.")


def validate_prompt_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError("A static prompt needs at least one message.")
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise ValueError("Each prompt message needs a role, 'user' or 'assistant'.")
        content = message.get("content")
        if not isinstance(content, dict) or content.get("type") not in CONTENT_BLOCK_FIELDS:
            raise ValueError("Each prompt message needs one content block with a known type.")


def fill_placeholders(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{name}`` that ``values`` knows replaced; other braces are left alone."""
    return PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), text)


def _fill(value: Any, arguments: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return fill_placeholders(value, arguments)
    if isinstance(value, list):
        return [_fill(item, arguments) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, arguments) for key, item in value.items()}
    return value


def render_static_prompt(messages: Sequence[Mapping[str, Any]], arguments: Mapping[str, str]) -> list[dict[str, Any]]:
    """The configured messages with ``{argument}`` placeholders filled in (unknown placeholders stay)."""
    return [_fill(dict(message), arguments) for message in messages]


def validate_uri_template(template: str) -> None:
    """Raise ``ValueError`` for a template with two variables side by side (``{a}{b}``): where one ends and the
    next begins would be arbitrary. Refused when a tenant saves a resource and when one is synced from an
    upstream; matching stays linear-time whatever the template (``patterns.UriTemplate``)."""
    found = [(match.start(), match.end()) for match in PLACEHOLDER.finditer(template)]
    for (_, end), (start, _) in itertools.pairwise(found):
        if end == start:
            raise ValueError(
                "Two URI template variables side by side ({a}{b}) cannot be told apart; put a literal between them."
            )
