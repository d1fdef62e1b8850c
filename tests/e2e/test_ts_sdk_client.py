"""The official TypeScript SDK (``@modelcontextprotocol/sdk`` 1.x) as a handshake-era client of a daphne process.

``ts_client.mjs`` drives ``Client`` over ``StreamableHTTPClientTransport`` with the agent's bearer token: it
initializes, lists and calls tools (counting progress callbacks), lists and reads a static resource and a URI
template, lists and gets a prompt, completes a prompt argument and terminates the session. It prints what it
saw as one JSON object, which this module asserts on; afterwards a request carrying the terminated session id
must get 404.

The pinned SDK (1.32.2, the newest 1.x when pinned, in ``tests/e2e/node/package.json``) comes from
``make npm-tools`` (``tests/e2e/node_tools.py``); nothing is downloaded at test time. Without it the test is
skipped, unless ``MCP_REQUIRE_SERVICES=1`` (then it fails).

``ts_tasks_client.mjs`` drives the SDK's experimental 2025-11-25 tasks client (``client.experimental.tasks``:
``callToolStream`` with a task, ``getTask``, ``listTasks``, ``cancelTask``) the same way.

Not covered here: the Python SDK (``test_sdk_client.py``, ``test_sdk_legacy_features.py``), exact frames
(``test_wire.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_app.protocol.versions import V2025_11_25
from tests.conftest import Access
from tests.e2e.features import (
    ITEM_MIME,
    ITEM_TEMPLATE,
    PROMPT_DESCRIPTION,
    PROMPT_NAME,
    README_MIME,
    README_TEXT,
    README_URI,
    TOOLS,
    build_feature_access,
    item_text,
    rendered_prompt,
    style_completions,
)
from tests.e2e.node_tools import any_node, package_dir

pytestmark = pytest.mark.e2e

SDK_PACKAGE = "@modelcontextprotocol/sdk"
SCRIPT = Path(__file__).with_name("ts_client.mjs")
RUN_TIMEOUT_SECONDS = 60
REQUEST_TIMEOUT_MS = 10_000
HTTP_TIMEOUT_SECONDS = 10.0

PROGRESS_STEPS = 3
ECHO_TEXT = "hello from typescript"
ITEM_ID = "42"
TOPIC = "MCP sessions"
STYLE = "brief"
COMPLETE_VALUE = "b"


@dataclass(frozen=True)
class TsSdk:
    node: str
    package_dir: Path


@pytest.fixture(scope="session")
def ts_sdk() -> TsSdk:
    """Node and the pinned SDK, as ``make npm-tools`` installed them (nothing is downloaded here)."""
    return TsSdk(node=any_node(), package_dir=package_dir(SDK_PACKAGE))


@pytest.fixture
def feature_access(transactional_db: None, access_factory: Callable[..., Access]) -> Access:
    """Tools, resources, a template and a prompt on one server, committed so that daphne sees them."""
    return build_feature_access(access_factory)


def _run_client(ts_sdk: TsSdk, url: str, access: Access, *, script: Path = SCRIPT) -> dict[str, Any]:
    fixture = {
        "templateUri": ITEM_TEMPLATE.replace("{item_id}", ITEM_ID),
        "promptArguments": {"topic": TOPIC, "style": STYLE},
        "completeValue": COMPLETE_VALUE,
        "progressSteps": PROGRESS_STEPS,
        "echoText": ECHO_TEXT,
    }
    env = {
        **os.environ,
        "MCP_TS_SDK_DIR": str(ts_sdk.package_dir),
        "MCP_URL": url,
        "MCP_TOKEN": access.raw_token,
        "MCP_FIXTURE": json.dumps(fixture),
        "MCP_TIMEOUT_MS": str(REQUEST_TIMEOUT_MS),
        "NO_COLOR": "1",
    }
    try:
        run = subprocess.run(
            [ts_sdk.node, str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        stderr = expired.stderr.decode(errors="replace") if isinstance(expired.stderr, bytes) else expired.stderr
        pytest.fail(f"{script.name} did not finish in {RUN_TIMEOUT_SECONDS}s; stderr:\n{stderr}")
    assert run.returncode == 0, f"{script.name} exited {run.returncode}; stderr:\n{run.stderr}\nstdout:\n{run.stdout}"
    lines = run.stdout.strip().splitlines()
    assert lines, f"{script.name} printed nothing; stderr:\n{run.stderr}"
    return json.loads(lines[-1])


def _texts(content: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(block["type"], block.get("text", "")) for block in content]


def test_typescript_sdk_uses_every_handshake_era_feature(
    ts_sdk: TsSdk, daphne_url: str, feature_access: Access
) -> None:
    url = f"{daphne_url}{feature_access.path}?{feature_access.query}"

    seen = _run_client(ts_sdk, url, feature_access)

    # Handshake: the SDK offers its latest revision, which mcp-host echoes, and a session is issued.
    assert seen["sdkLatestProtocolVersion"] == V2025_11_25
    assert seen["protocolVersion"] == V2025_11_25
    assert seen["sessionId"], "initialize did not issue an Mcp-Session-Id"
    assert seen["serverInfo"]["name"]
    capabilities = seen["serverCapabilities"]
    assert {"tools", "resources", "prompts", "completions"} <= capabilities.keys()

    # Tools, and progress: one callback per step, in order.
    assert [tool["name"] for tool in seen["tools"]] == list(TOOLS)
    assert seen["echo"].get("isError", False) is False
    assert _texts(seen["echo"]["content"]) == [("text", ECHO_TEXT)]
    assert seen["progressResult"].get("isError", False) is False
    assert _texts(seen["progressResult"]["content"]) == [("text", f"Completed {PROGRESS_STEPS} steps.")]
    assert [(update["progress"], update["total"]) for update in seen["progress"]] == [
        (step, PROGRESS_STEPS) for step in range(1, PROGRESS_STEPS + 1)
    ]

    # Resources: the static one and the template are listed apart; both read back with their MIME types.
    assert [(item["uri"], item["name"], item.get("mimeType")) for item in seen["resources"]] == [
        (README_URI, "readme", README_MIME)
    ]
    assert [(item["uriTemplate"], item["name"]) for item in seen["resourceTemplates"]] == [(ITEM_TEMPLATE, "item")]
    assert seen["staticRead"]["contents"] == [{"uri": README_URI, "mimeType": README_MIME, "text": README_TEXT}]
    item_uri = ITEM_TEMPLATE.replace("{item_id}", ITEM_ID)
    assert seen["templateRead"]["contents"] == [{"uri": item_uri, "mimeType": ITEM_MIME, "text": item_text(ITEM_ID)}]

    # Prompts and completion.
    [prompt] = seen["prompts"]
    assert prompt["name"] == PROMPT_NAME
    assert [(argument["name"], argument.get("required")) for argument in prompt["arguments"]] == [
        ("topic", True),
        ("style", False),
    ]
    assert seen["prompt"].get("description") == PROMPT_DESCRIPTION
    assert [
        (message["role"], message["content"]["type"], message["content"]["text"])
        for message in seen["prompt"]["messages"]
    ] == rendered_prompt(TOPIC, STYLE)
    expected_completions = style_completions(COMPLETE_VALUE)
    assert expected_completions  # the fixture must offer something to complete
    assert seen["completion"]["values"] == expected_completions
    assert seen["completion"].get("total") == len(expected_completions)
    assert seen["completion"].get("hasMore") is False

    # The wire: one session from initialize to DELETE, the negotiated version on every later request, progress
    # on an SSE response, and the standalone GET stream the SDK opens after the handshake.
    session_id = seen["sessionId"]
    posts_and_delete = [
        (exchange["httpMethod"], exchange["rpc"], exchange["status"])
        for exchange in seen["exchanges"]
        if exchange["httpMethod"] != "GET"
    ]
    assert posts_and_delete == [
        ("POST", "initialize", 200),
        ("POST", "notifications/initialized", 202),
        ("POST", "tools/list", 200),
        ("POST", "tools/call", 200),
        ("POST", "tools/call", 200),
        ("POST", "resources/list", 200),
        ("POST", "resources/templates/list", 200),
        ("POST", "resources/read", 200),
        ("POST", "resources/read", 200),
        ("POST", "prompts/list", 200),
        ("POST", "prompts/get", 200),
        ("POST", "completion/complete", 200),
        ("DELETE", None, 204),
    ]
    initialize, *later = seen["exchanges"]
    assert (initialize["sentSessionId"], initialize["receivedSessionId"]) == (None, session_id)
    assert {(exchange["sentSessionId"], exchange["sentProtocolVersion"]) for exchange in later} == {
        (session_id, V2025_11_25)
    }
    progress_post = [exchange for exchange in later if exchange["rpc"] == "tools/call"][1]
    assert progress_post["contentType"].startswith("text/event-stream")
    gets = [exchange for exchange in seen["exchanges"] if exchange["httpMethod"] == "GET"]
    assert [(get["status"], get["contentType"].split(";")[0]) for get in gets] == [(200, "text/event-stream")]

    # Termination: the SDK forgot the id, and the server no longer knows it.
    assert seen["sessionIdAfterTerminate"] is None
    assert seen["transportErrors"] == []
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {
        "Authorization": f"Bearer {feature_access.raw_token}",
        "Accept": "application/json, text/event-stream",
        "Mcp-Session-Id": session_id,
        "MCP-Protocol-Version": seen["protocolVersion"],
    }
    after = httpx.post(url, json=ping, headers=headers, timeout=HTTP_TIMEOUT_SECONDS)
    assert after.status_code == 404, after.text


TASKS_SCRIPT = Path(__file__).with_name("ts_tasks_client.mjs")
TASK_KEYS = {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}


@pytest.fixture
def task_tools_access(transactional_db: None, access_factory: Callable[..., Access]) -> Access:
    """The conformance fixtures with task support: optional, required (ends with a tool error), forbidden."""
    return access_factory(tools=("slow_compute", "failing_job", "greet"))


def test_typescript_sdk_runs_experimental_tasks(ts_sdk: TsSdk, daphne_url: str, task_tools_access: Access) -> None:
    """The SDK's experimental tasks client (``client.experimental.tasks``, 2025-11-25) drives every task method."""
    access = task_tools_access
    url = f"{daphne_url}{access.path}?{access.query}"

    seen = _run_client(ts_sdk, url, access, script=TASKS_SCRIPT)

    assert seen["protocolVersion"] == V2025_11_25
    assert seen["serverCapabilities"]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert seen["isToolTask"] == {"slow_compute": True, "failing_job": True, "greet": False}

    # An optional tool called as a task: created working, polled, then its result from tasks/result.
    kinds = [message["type"] for message in seen["completedStream"]]
    assert kinds[0] == "taskCreated" and kinds[-1] == "result", kinds
    assert set(kinds[1:-1]) == {"taskStatus"}
    created = seen["completedStream"][0]["task"]
    assert created["status"] == "working" and created["ttl"] == 60000 and set(created) <= TASK_KEYS
    statuses = [message["task"]["status"] for message in seen["completedStream"][1:-1]]
    assert statuses[-1] == "completed" and set(statuses) <= {"working", "completed"}
    result = seen["completedStream"][-1]["result"]
    assert result["content"] == [{"type": "text", "text": "slow_compute 'ts' finished after 1s"}]
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": created["taskId"]}

    # A required tool that ends with a tool error: the task fails (2025-11-25: isError is a failure).
    failed = seen["failedStream"]
    assert failed[0]["type"] == "taskCreated"
    assert failed[-2]["task"]["status"] == "failed"
    assert failed[-1]["type"] == "error"

    # Cancelling a running task, then a terminal one.
    assert seen["cancelled"]["status"] == "cancelled" and seen["cancelled"]["taskId"] == seen["longTask"]["taskId"]
    assert seen["afterCancel"]["status"] == "cancelled"
    assert seen["cancelAgain"]["code"] == -32602
    assert seen["unknown"]["code"] == -32602

    # tasks/list: the three tasks of this agent, newest first.
    ids = [task["taskId"] for task in seen["listed"]["tasks"]]
    assert ids == [seen["longTask"]["taskId"], failed[0]["task"]["taskId"], created["taskId"]]
    assert seen["transportErrors"] == []
