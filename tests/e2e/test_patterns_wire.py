"""Tenant-written patterns never stall the event loop (issue 25 #12, #13), replayed through a real daphne.

At 7eabff9 a resource template with adjacent variables (``probe://{a}{b}{c}{d}{e}{f}{g}{h}/end``) backtracked
about N⁷ in ``resources/read`` of a crafted URI (2.6 s at 42 characters), and a static tool's ``matches`` regex
``^(a+)+$`` doubled per character (0.6 s at 24 ``a``s and ``!``), both on the event loop: another tenant's
``echo`` on the same process waited seconds. Both are matched by RE2 now (``mcp_app.definitions.patterns``):
here tenant A replays both attacks while tenant B's ``echo`` latency stays within a bound of its own baseline.
Adjacent variables are refused at save now, so that template is stored as a row saved before the check; a
template that is accepted, with a literal between its variables, backtracks in ``re`` too (6 s at 50
characters) and is replayed as well. The sync's refusal: ``tests/e2e/federation/test_sync.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import Access
from tests.helpers import endpoint, post_headers, rpc

pytestmark = pytest.mark.e2e

ADJACENT = "probe://{a}{b}{c}{d}{e}{f}{g}{h}/end"
SEPARATED = "sep://{a}-{b}-{c}-{d}-{e}-{f}-{g}-{h}/end"
EVIL_REGEX = "^(a+)+$"
# No "/end": every split of the characters is tried by a backtracker (seconds each in re at 7eabff9).
EVIL_URIS = ("probe://" + "x" * 42, "sep://" + "-" * 46)
EVIL_TEXT = "a" * 26 + "!"  # ~2 s in re at 7eabff9, doubling per character
ROUNDS = 4  # each attack, this many times during the victim's calls
VICTIM_CALLS = 30
# How much tenant B's p99 may grow under the attack: far below one backtracking match (seconds at 7eabff9),
# far above the noise of a loaded two-core machine.
SLOWER_BY_AT_MOST = 1.0
ERA = {"MCP-Protocol-Version": "2025-11-25"}


@pytest.fixture
def tenants(transactional_db: None, access_factory: Callable[..., Access]) -> tuple[Access, Access]:
    """Tenant A: a static tool matching ``EVIL_REGEX`` and the two template resources; tenant B: ``echo``."""
    from django.core.exceptions import ValidationError

    from mcp_app.models import Resource, ServerResource, ServerTool, Tool

    attacker, victim = access_factory(tools=()), access_factory(tools=("echo",))
    probe = Tool(
        tenant=attacker.tenant,
        name="probe",
        static_result={"content": [{"type": "text", "text": "no match"}]},
        static_cases=[
            {
                "pointer": [{"pointer": "/text", "matches": EVIL_REGEX}],
                "result": {"content": [{"type": "text", "text": "match"}]},
            }
        ],
    )
    probe.full_clean()  # what the admin and the API run: the regex is accepted
    probe.save()
    ServerTool.objects.create(server=attacker.server, tool=probe, position=0)
    adjacent = Resource(tenant=attacker.tenant, uri=ADJACENT, name="probe", is_template=True, text="{a}|{h}")
    with pytest.raises(ValidationError, match="side by side"):
        adjacent.full_clean()
    adjacent.save()  # as stored before the check
    separated = Resource(tenant=attacker.tenant, uri=SEPARATED, name="sep", is_template=True, text="{a}|{h}")
    separated.full_clean()
    separated.save()
    for position, resource in enumerate((adjacent, separated)):
        ServerResource.objects.create(server=attacker.server, resource=resource, position=position)
    return attacker, victim


def p99(seconds: list[float]) -> float:
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def timed_echoes(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> list[float]:
    took = []
    for n in range(VICTIM_CALLS):
        started = time.monotonic()
        reply = await http.post(
            url, json=rpc("tools/call", {"name": "echo", "arguments": {"text": f"b{n}"}}), headers=headers
        )
        took.append(time.monotonic() - started)
        assert reply.status_code == 200 and reply.json()["result"]["content"][0]["text"] == f"b{n}"
    return took


async def test_crafted_uris_and_regex_inputs_do_not_stall_another_tenant(
    daphne_url: str, tenants: tuple[Access, Access]
) -> None:
    attacker, victim = tenants
    a_url, a_headers = endpoint(daphne_url, attacker), {**post_headers(attacker), **ERA}
    b_url, b_headers = endpoint(daphne_url, victim), {**post_headers(victim), **ERA}
    async with httpx.AsyncClient(timeout=60) as http:

        async def post(body: dict[str, Any]) -> dict[str, Any]:
            reply = await http.post(a_url, json=body, headers=a_headers)
            assert reply.status_code == 200, reply.text
            return reply.json()

        # The patterns still mean what they say.
        read = await post(rpc("resources/read", {"uri": "probe://abcdefghij/end"}))
        assert read["result"]["contents"][0]["text"] == "abc|j"  # leftmost-first, as before
        read = await post(rpc("resources/read", {"uri": "sep://a-b-c-d-e-f-g-h-i/end"}))
        assert read["result"]["contents"][0]["text"] == "a-b|i"  # the leftmost variable takes the most, as re did
        matched = await post(rpc("tools/call", {"name": "probe", "arguments": {"text": "aaaa"}}))
        assert matched["result"]["content"][0]["text"] == "match"

        baseline = await timed_echoes(http, b_url, b_headers)
        finished = asyncio.Event()
        attacks: list[float] = []

        async def attack() -> None:
            for _ in range(ROUNDS):
                for body in (
                    *(rpc("resources/read", {"uri": uri}) for uri in EVIL_URIS),
                    rpc("tools/call", {"name": "probe", "arguments": {"text": EVIL_TEXT}}),
                ):
                    started = time.monotonic()
                    answer = await post(body)
                    attacks.append(time.monotonic() - started)
                    if body["method"] == "tools/call":
                        assert answer["result"]["content"][0]["text"] == "no match"
                    else:
                        assert "error" in answer  # no such resource
                    if finished.is_set():
                        return

        async def victim_calls() -> list[float]:
            try:
                return await timed_echoes(http, b_url, b_headers)
            finally:
                finished.set()

        _, under_attack = await asyncio.gather(attack(), victim_calls())

    assert attacks, "no attack ran during tenant B's calls"
    assert p99(under_attack) <= p99(baseline) + SLOWER_BY_AT_MOST, (baseline, under_attack, attacks)
    assert max(attacks) <= SLOWER_BY_AT_MOST, attacks
