"""A bounded property-based fuzz of the MCP endpoint against a real daphne process (hypothesis): whatever the
body, the headers' era and the method, the answer is never a 5xx.

Bodies are drawn from three families: any JSON value, JSON-RPC messages with fuzzed fields (ids, methods of
both eras, params, ``_meta`` with tokens and envelopes), and raw bytes. ``MAX_EXAMPLES`` keeps it to CI's time.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Access
from tests.helpers import endpoint
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

MAX_EXAMPLES = 300
METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/list",
    "tasks/cancel",
    "subscriptions/listen",
    "server/discover",
    "notifications/initialized",
    "notifications/cancelled",
    "nope",
]
TOOLS = ["echo", "add", "get_time", "progress_demo", "missing"]


def _encode(value: Any) -> bytes:
    """The stdlib encoder: integers past 64 bits, and ``Infinity`` (not JSON: the server must refuse it), pass."""
    return json.dumps(value).encode()


json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
ids = st.none() | st.integers(-(2**63), 2**63) | st.text(max_size=20) | st.booleans() | st.floats(allow_nan=False)
meta = st.fixed_dictionaries(
    {},
    optional={
        "progressToken": ids,
        "io.modelcontextprotocol/protocolVersion": st.sampled_from(["2026-07-28", "2025-11-25", "x"]),
        "io.modelcontextprotocol/clientInfo": json_values,
        "io.modelcontextprotocol/clientCapabilities": json_values,
    },
)
params = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(TOOLS) | st.text(max_size=10),
        "arguments": st.dictionaries(st.sampled_from(["text", "a", "b", "steps", "x"]), json_values, max_size=3),
        "_meta": meta,
        "protocolVersion": st.sampled_from(["2025-11-25", "2025-03-26", "2024-11-05", "junk"]),
        "uri": st.text(max_size=30),
        "cursor": st.text(max_size=10),
    },
)
messages = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "2.0", "1.0"]), "method": st.sampled_from(METHODS) | st.text(max_size=8)},
    optional={"id": ids, "params": params | json_values},
)
bodies = (
    messages.map(_encode)
    | st.lists(messages, min_size=1, max_size=4).map(_encode)
    | json_values.map(_encode)
    | st.binary(max_size=200)
)
era_headers = st.sampled_from(
    [{}, {"MCP-Protocol-Version": "2025-11-25"}, {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}]
)


@pytest.fixture
def client() -> Any:
    with httpx.Client(timeout=30) as http:
        yield http


def test_no_input_makes_the_endpoint_answer_5xx(daphne_url: str, live_access: Access, client: httpx.Client) -> None:
    url = endpoint(daphne_url, live_access)
    seen: list[int] = []

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(body=bodies, extra=era_headers)
    def probe(body: bytes, extra: dict[str, str]) -> None:
        reply = client.post(url, content=body, headers=headers(live_access, **extra))
        seen.append(reply.status_code)
        assert reply.status_code < 500, (body[:300], extra, reply.status_code, reply.text[:300])

    probe()
    assert len(seen) >= MAX_EXAMPLES // 2
