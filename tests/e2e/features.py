"""The catalog the handshake-era SDK feature tests share: the demo tools plus resources, a template and a prompt.

``build_feature_access`` writes it with the ORM (callers run it in a sync fixture under ``transactional_db`` so
that daphne sees the rows) and the constants below are what the tests expect to read back through a client.

Not owned here: the daphne process and the domain factories (``tests/e2e/conftest.py``, ``tests/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Access

TOOLS = ("echo", "add", "get_time", "progress_demo")

README_URI = "test://docs/readme.md"
README_TEXT = "# mcp-host\nServed over Streamable HTTP."
README_MIME = "text/markdown"
ITEM_TEMPLATE = "test://items/{item_id}"
ITEM_TEXT = "Item {item_id} is in stock."
ITEM_MIME = "text/plain"

PROMPT_NAME = "summarize"
PROMPT_DESCRIPTION = "Summarize a topic in a given style."
PROMPT_STYLES = ["brief", "bullet points", "detailed"]
PROMPT_ARGUMENTS: list[dict[str, Any]] = [
    {"name": "topic", "description": "What to summarize", "required": True},
    {"name": "style", "description": "How to write it", "required": False, "completions": PROMPT_STYLES},
]
PROMPT_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": {"type": "text", "text": "Summarize {topic} in a {style} style."}},
    {"role": "assistant", "content": {"type": "text", "text": "Here is a {style} summary of {topic}:"}},
]


def rendered_prompt(topic: str, style: str) -> list[tuple[str, str, str]]:
    """``PROMPT_MESSAGES`` filled in, as (role, content type, text) triples."""
    return [
        (message["role"], message["content"]["type"], message["content"]["text"].format(topic=topic, style=style))
        for message in PROMPT_MESSAGES
    ]


def build_feature_access(access_factory: Callable[..., Access]) -> Access:
    """A server exposing ``TOOLS``, a static text resource, a URI template and a static prompt."""
    from mcp_app.models import Prompt, Resource, ServerPrompt, ServerResource

    access = access_factory(tools=TOOLS)
    server, tenant = access.server, access.tenant
    readme = Resource.objects.create(
        tenant=tenant,
        uri=README_URI,
        name="readme",
        title="Read me",
        description="What this server is.",
        mime_type=README_MIME,
        text=README_TEXT,
    )
    items = Resource.objects.create(
        tenant=tenant,
        uri=ITEM_TEMPLATE,
        is_template=True,
        name="item",
        description="One stock item.",
        mime_type=ITEM_MIME,
        text=ITEM_TEXT,
    )
    for resource in (readme, items):
        resource.full_clean()
    ServerResource.objects.create(server=server, resource=readme, position=0)
    ServerResource.objects.create(server=server, resource=items, position=1)
    prompt = Prompt.objects.create(
        tenant=tenant,
        name=PROMPT_NAME,
        title="Summarize",
        description=PROMPT_DESCRIPTION,
        arguments=PROMPT_ARGUMENTS,
        messages=PROMPT_MESSAGES,
    )
    prompt.full_clean()
    ServerPrompt.objects.create(server=server, prompt=prompt, position=0)
    server.refresh_from_db()
    access.server = server
    return access


def item_text(item_id: str) -> str:
    return ITEM_TEXT.format(item_id=item_id)


def style_completions(prefix: str) -> list[str]:
    return [style for style in PROMPT_STYLES if style.lower().startswith(prefix.lower())]
