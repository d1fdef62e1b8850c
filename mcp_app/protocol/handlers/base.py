"""The shared ``dispatcher`` the handler modules register their methods on (its own module, so that the handler
modules import it without importing their package: no package-module import cycle), and their shared checks."""

from typing import Any

from ..dispatcher import Dispatcher, MessageContext
from ..errors import InvalidParams
from ..pagination import page

dispatcher = Dispatcher()


def required_string(params: dict[str, Any], key: str) -> str:
    """``params[key]`` when it is a non-empty string, else -32602."""
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidParams(f'Invalid params: "{key}" must be a non-empty string')
    return value


def catalog_page(
    message: MessageContext, params: dict[str, Any], kind: str, items: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The page ``params`` asks for of the catalog's ``kind`` list (or of ``items``), within the request's limits."""
    ctx = message.request
    return page(ctx.catalog.wire(kind) if items is None else items, params, ctx.page_size, kind, ctx.page_bytes)
