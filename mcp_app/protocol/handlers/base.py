"""The shared ``dispatcher`` the handler modules register their methods on (its own module, so that the handler
modules import it without importing their package: no package-module import cycle), and their shared checks."""

from typing import Any

from ..dispatcher import Dispatcher
from ..errors import InvalidParams

dispatcher = Dispatcher()


def required_string(params: dict[str, Any], key: str) -> str:
    """``params[key]`` when it is a non-empty string, else -32602."""
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidParams(f'Invalid params: "{key}" must be a non-empty string')
    return value
