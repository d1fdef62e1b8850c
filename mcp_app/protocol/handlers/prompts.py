"""``prompts/list``, ``prompts/get`` and ``completion/complete``.

Prompt arguments are strings (-32602 otherwise, or when a required one is missing). Completion offers a prompt
argument's configured ``completions`` that start with what the user typed, case-insensitively, at most 100;
resource-template variables have no configured values yet (an empty list).
"""

from __future__ import annotations

from typing import Any

from ..dispatcher import MessageContext
from ..errors import InvalidParams
from .base import catalog_page, dispatcher, required_string

MAX_COMPLETIONS = 100


@dispatcher.request("prompts/list")
async def list_prompts(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    return catalog_page(message, params, "prompts")


@dispatcher.request("prompts/get")
async def get_prompt(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    name = required_string(params, "name")
    ctx = message.request
    prompt = ctx.catalog.prompt(name)
    if prompt is None:
        raise InvalidParams(f"Unknown prompt: {name}", data={"name": name})
    arguments = params.get("arguments") or {}
    if not isinstance(arguments, dict) or not all(isinstance(value, str) for value in arguments.values()):
        raise InvalidParams('Invalid params: "arguments" must map argument names to strings')
    missing = [argument.name for argument in prompt.arguments if argument.required and argument.name not in arguments]
    if missing:
        raise InvalidParams(f"Missing required argument(s) for prompt {name}: {', '.join(missing)}")
    call = message.call(params)
    return await ctx.runner.get_prompt(prompt, dict(arguments), call)


@dispatcher.request("completion/complete")
async def complete(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    ref = params.get("ref")
    argument = params.get("argument")
    if not isinstance(ref, dict) or not isinstance(argument, dict):
        raise InvalidParams('Invalid params: "ref" and "argument" must be objects')
    argument_name = argument.get("name")
    value = argument.get("value", "")
    if not isinstance(argument_name, str) or not isinstance(value, str):
        raise InvalidParams('Invalid params: "argument" needs a string name and value')
    catalog = message.request.catalog
    candidates: tuple[str, ...] = ()
    if ref.get("type") == "ref/prompt":
        prompt_name = ref.get("name")
        prompt = catalog.prompt(prompt_name if isinstance(prompt_name, str) else "")
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {ref.get('name')}")
        configured = prompt.argument(argument_name)
        candidates = configured.completions if configured else ()
    elif ref.get("type") == "ref/resource":
        uri = ref.get("uri")
        template = catalog.template(uri) if isinstance(uri, str) else None
        if template is None and (not isinstance(uri, str) or catalog.find_resource(uri) is None):
            raise InvalidParams(f"Unknown resource: {uri}")
    else:
        raise InvalidParams('Invalid params: ref.type must be "ref/prompt" or "ref/resource"')
    matches = [candidate for candidate in candidates if candidate.lower().startswith(value.lower())]
    return {
        "completion": {
            "values": matches[:MAX_COMPLETIONS],
            "total": len(matches),
            "hasMore": len(matches) > MAX_COMPLETIONS,
        }
    }
