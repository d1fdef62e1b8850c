"""The prompt, completion, resource and subscription handlers against a hand-built catalog, without a database:
what each refuses (by code against ``mcp_app.protocol.errors``), the era-specific code of an unknown resource,
completion's matching and cap, and what ``subscriptions/listen`` acknowledges and lets through."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mcp_app.protocol import versions
from mcp_app.protocol.context import OpenStream, RequestContext
from mcp_app.protocol.descriptors import PromptArgument, PromptDescriptor, ResourceDescriptor, ServerCatalog
from mcp_app.protocol.errors import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND
from mcp_app.protocol.handlers.prompts import MAX_COMPLETIONS
from mcp_app.protocol.handlers.subscriptions import RESOURCE_UPDATED, SUPPORTED_FILTERS
from mcp_app.protocol.modern import META_SUBSCRIPTION_ID

MakeCtx = Callable[..., RequestContext]
Rpc = Callable[..., Awaitable[Any]]

CITIES = tuple(f"City {n:03d}" for n in range(MAX_COMPLETIONS + 5))
CATALOG = ServerCatalog(
    prompts=(
        PromptDescriptor(
            name="plan",
            arguments=(
                PromptArgument("city", required=True, completions=("Oslo", "Osaka", "Ottawa", "Paris")),
                PromptArgument("mood"),
                PromptArgument("many", completions=CITIES),
            ),
        ),
    ),
    resources=(ResourceDescriptor(uri="res://a", name="a"),),
    templates=(
        ResourceDescriptor(
            uri="res://items/{id}", name="item", is_template=True, pattern=re.compile(r"^res://items/(?P<id>[^/]+)$")
        ),
    ),
)


def ctx_for(make_ctx: MakeCtx, era: str = versions.LEGACY) -> RequestContext:
    version = versions.V2026_07_28 if era == versions.MODERN else versions.V2025_11_25
    return dataclasses.replace(make_ctx(protocol_version=version), catalog=CATALOG, era=era)


def error_of(response: dict[str, Any], code: int) -> dict[str, Any]:
    assert "result" not in response, response
    assert response["error"]["code"] == code, response
    return response["error"]


# ----------------------------------------------------------------------------------------- prompts


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"name": ""},
        {"name": "plan", "arguments": {"city": 3}},
        {"name": "plan", "arguments": ["Oslo"]},
        {"name": "plan", "arguments": {"mood": "calm"}},  # the required city is missing
    ],
    ids=["no name", "empty name", "non-string value", "not an object", "required missing"],
)
async def test_a_malformed_prompt_request_is_invalid_params(make_ctx: MakeCtx, rpc: Rpc, params: dict) -> None:
    error_of(await rpc(ctx_for(make_ctx), "prompts/get", params), INVALID_PARAMS)


async def test_an_unknown_prompt_is_invalid_params_naming_it(make_ctx: MakeCtx, rpc: Rpc) -> None:
    error = error_of(await rpc(ctx_for(make_ctx), "prompts/get", {"name": "nope"}), INVALID_PARAMS)
    assert error["data"] == {"name": "nope"}


async def test_prompts_list_shows_the_arguments(make_ctx: MakeCtx, rpc: Rpc) -> None:
    [plan] = (await rpc(ctx_for(make_ctx), "prompts/list"))["result"]["prompts"]
    assert plan["arguments"][0] == {"name": "city", "required": True}


# -------------------------------------------------------------------------------------- completion


def completion(name: str, value: str, argument: str = "city") -> dict[str, Any]:
    return {"ref": {"type": "ref/prompt", "name": name}, "argument": {"name": argument, "value": value}}


async def test_completion_offers_the_configured_values_by_case_insensitive_prefix(make_ctx: MakeCtx, rpc: Rpc) -> None:
    result = (await rpc(ctx_for(make_ctx), "completion/complete", completion("plan", "os")))["result"]
    assert result["completion"] == {"values": ["Oslo", "Osaka"], "total": 2, "hasMore": False}
    nothing = (await rpc(ctx_for(make_ctx), "completion/complete", completion("plan", "x", "mood")))["result"]
    assert nothing["completion"] == {"values": [], "total": 0, "hasMore": False}


async def test_completion_answers_at_most_its_cap_and_says_there_is_more(make_ctx: MakeCtx, rpc: Rpc) -> None:
    result = (await rpc(ctx_for(make_ctx), "completion/complete", completion("plan", "city", "many")))["result"]
    assert len(result["completion"]["values"]) == MAX_COMPLETIONS
    assert result["completion"]["total"] == len(CITIES) and result["completion"]["hasMore"] is True


async def test_a_template_variable_completes_to_nothing_yet(make_ctx: MakeCtx, rpc: Rpc) -> None:
    params = {"ref": {"type": "ref/resource", "uri": "res://items/{id}"}, "argument": {"name": "id", "value": ""}}
    result = (await rpc(ctx_for(make_ctx), "completion/complete", params))["result"]
    assert result["completion"]["values"] == []


@pytest.mark.parametrize(
    "params",
    [
        completion("nope", ""),
        {"ref": {"type": "ref/resource", "uri": "res://none"}, "argument": {"name": "id", "value": ""}},
        {"ref": {"type": "ref/tool", "name": "plan"}, "argument": {"name": "city", "value": ""}},
        {"ref": "plan", "argument": {"name": "city", "value": ""}},
        {"ref": {"type": "ref/prompt", "name": "plan"}, "argument": {"name": 1, "value": ""}},
    ],
    ids=["unknown prompt", "unknown resource", "unknown ref type", "ref not an object", "argument name"],
)
async def test_a_completion_of_nothing_known_is_invalid_params(make_ctx: MakeCtx, rpc: Rpc, params: dict) -> None:
    error_of(await rpc(ctx_for(make_ctx), "completion/complete", params), INVALID_PARAMS)


# ---------------------------------------------------------------------------------------- resources


async def test_an_unknown_resource_is_resource_not_found_in_the_handshake_era(make_ctx: MakeCtx, rpc: Rpc) -> None:
    error = error_of(await rpc(ctx_for(make_ctx), "resources/read", {"uri": "res://none"}), RESOURCE_NOT_FOUND)
    assert error["data"] == {"uri": "res://none"}


async def test_an_unknown_resource_is_invalid_params_in_2026(make_ctx: MakeCtx, rpc: Rpc) -> None:
    ctx = ctx_for(make_ctx, versions.MODERN)
    error = error_of(await rpc(ctx, "resources/read", {"uri": "res://none"}), INVALID_PARAMS)
    assert error["data"] == {"uri": "res://none"}


@pytest.mark.parametrize("method", ["resources/read", "resources/subscribe", "resources/unsubscribe"])
async def test_a_missing_uri_is_invalid_params(make_ctx: MakeCtx, rpc: Rpc, method: str) -> None:
    error_of(await rpc(ctx_for(make_ctx), method, {}), INVALID_PARAMS)


async def test_subscribing_needs_a_session(make_ctx: MakeCtx, rpc: Rpc) -> None:
    error_of(await rpc(ctx_for(make_ctx), "resources/subscribe", {"uri": "res://a"}), INVALID_REQUEST)


@pytest.mark.parametrize("method", ["resources/subscribe", "resources/unsubscribe"])
async def test_2026_has_no_per_resource_subscriptions(make_ctx: MakeCtx, rpc: Rpc, method: str) -> None:
    error_of(await rpc(ctx_for(make_ctx, versions.MODERN), method, {"uri": "res://a"}), METHOD_NOT_FOUND)


# ------------------------------------------------------------------------------ subscriptions/listen


async def test_listen_acknowledges_only_what_it_supports_and_stamps_the_subscription(
    make_ctx: MakeCtx, rpc: Rpc
) -> None:
    requested = {
        "toolsListChanged": True,
        "promptsListChanged": False,
        "madeUp": True,
        "resourceSubscriptions": ["res://a"],
    }
    stream = await rpc(ctx_for(make_ctx, versions.MODERN), "subscriptions/listen", {"notifications": requested}, id=7)
    assert isinstance(stream, OpenStream)
    [ack] = stream.first
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"toolsListChanged": True, "resourceSubscriptions": ["res://a"]}
    assert ack["params"]["_meta"] == {META_SUBSCRIPTION_ID: 7}
    tools_changed = stream.translate({"method": SUPPORTED_FILTERS["toolsListChanged"]})
    assert tools_changed is not None and tools_changed["params"]["_meta"] == {META_SUBSCRIPTION_ID: 7}
    assert stream.translate({"method": SUPPORTED_FILTERS["promptsListChanged"]}) is None, "not asked for"
    assert stream.translate({"method": RESOURCE_UPDATED, "params": {"uri": "res://a"}}) is not None
    assert stream.translate({"method": RESOURCE_UPDATED, "params": {"uri": "res://b"}}) is None, "not watched"


@pytest.mark.parametrize(
    "params",
    [{}, {"notifications": []}, {"notifications": {"resourceSubscriptions": "res://a"}}],
    ids=["no notifications", "not an object", "uris not a list"],
)
async def test_a_malformed_listen_is_invalid_params(make_ctx: MakeCtx, rpc: Rpc, params: dict) -> None:
    error_of(await rpc(ctx_for(make_ctx, versions.MODERN), "subscriptions/listen", params), INVALID_PARAMS)


async def test_listen_is_the_stateless_eras_only(make_ctx: MakeCtx, rpc: Rpc) -> None:
    error_of(await rpc(ctx_for(make_ctx), "subscriptions/listen", {"notifications": {}}), METHOD_NOT_FOUND)
