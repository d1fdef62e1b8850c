"""Static-tool behaviour without a database: matching, validation of configurations, delays and progress."""

from __future__ import annotations

import pytest

from mcp_app.definitions.static import StaticBehaviour, case_matches, resolve_pointer, validate_static_config
from mcp_app.protocol.errors import ProtocolError

OK = {"content": [{"type": "text", "text": "default"}]}


def answer(text):
    return {"content": [{"type": "text", "text": text}]}


@pytest.mark.parametrize(
    ("case", "arguments", "expected"),
    [
        ({"equals": {"city": "Paris"}}, {"city": "Paris"}, True),
        ({"equals": {"city": "Paris"}}, {"city": "paris"}, False),
        ({"equals": {"n": 1}}, {}, False),
        ({"equals": {"tags": ["a"]}}, {"tags": ["a"]}, True),
        ({"contains": {"note": "urgent"}}, {"note": "very urgent!"}, True),
        ({"contains": {"tags": "b"}}, {"tags": ["a", "b"]}, True),
        ({"contains": {"note": "urgent"}}, {"note": 5}, False),
        ({"pointer": [{"pointer": "/order/id", "matches": "^A\\d+$"}]}, {"order": {"id": "A17"}}, True),
        ({"pointer": [{"pointer": "/order/id", "matches": "^A\\d+$"}]}, {"order": {"id": "B17"}}, False),
        ({"pointer": [{"pointer": "/items/1/sku", "equals": "X"}]}, {"items": [{"sku": "Y"}, {"sku": "X"}]}, True),
        ({"pointer": [{"pointer": "/a~1b", "exists": True}]}, {"a/b": None}, True),
        ({"pointer": [{"pointer": "/missing", "exists": False}]}, {}, True),
        ({"equals": {"city": "Paris"}, "contains": {"note": "x"}}, {"city": "Paris", "note": "y"}, False),
    ],
)
def test_conditions(case, arguments, expected):
    assert case_matches(case, arguments) is expected


def test_pointer_resolution_edge_cases():
    assert resolve_pointer({"a": [1, 2]}, "") == {"a": [1, 2]}
    assert resolve_pointer({"a": [1, 2]}, "/a/1") == 2
    assert resolve_pointer({"~": 3}, "/~0") == 3


async def test_first_matching_case_wins_and_the_default_answers_otherwise():
    behaviour = StaticBehaviour(
        result=OK,
        error=None,
        cases=(
            {"equals": {"city": "Paris"}, "result": answer("first")},
            {"contains": {"city": "Par"}, "result": answer("second")},
            {"equals": {"city": "Oslo"}, "error": {"code": -32050, "message": "closed", "data": {"x": 1}}},
        ),
    )

    async def report(*_args):
        raise AssertionError("no progress configured")

    assert (await behaviour.answer({"city": "Paris"}, report)) == answer("first")
    assert (await behaviour.answer({"city": "Parma"}, report)) == answer("second")
    assert (await behaviour.answer({"city": "Rome"}, report)) == OK
    with pytest.raises(ProtocolError) as refused:
        await behaviour.answer({"city": "Oslo"}, report)
    assert refused.value.to_wire() == {"code": -32050, "message": "closed", "data": {"x": 1}}


async def test_progress_steps_are_reported_before_the_answer():
    reported = []

    async def report(progress, total, message):
        reported.append((progress, total))

    behaviour = StaticBehaviour(result=OK, error=None, progress_steps=3, delay_ms=3)
    assert (await behaviour.answer({}, report)) == OK
    assert reported == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.parametrize(
    ("result", "error", "cases", "delay", "steps", "message"),
    [
        (OK, None, [{"result": OK}], 0, 0, "no condition"),
        (OK, None, [{"equals": {}, "result": OK, "error": {"code": 1, "message": "m"}}], 0, 0, "exactly one"),
        (OK, None, [{"pointer": [{"pointer": "a", "equals": 1}], "result": OK}], 0, 0, "start with '/'"),
        (OK, None, [{"pointer": [{"pointer": "/a", "matches": "("}], "result": OK}], 0, 0, "regular expression"),
        # Without a linear-time guarantee (issue 25 #13: matched by RE2, which refuses these at save).
        (OK, None, [{"pointer": [{"pointer": "/a", "matches": r"(a)\1"}], "result": OK}], 0, 0, "RE2"),
        (OK, None, [{"pointer": [{"pointer": "/a", "matches": "a(?=b)"}], "result": OK}], 0, 0, "RE2"),
        (OK, None, [{"pointer": [{"pointer": "/a", "matches": ["^a$"]}], "result": OK}], 0, 0, "regular expression"),
        (
            OK,
            None,
            [{"pointer": [{"pointer": "/a", "equals": 1, "exists": True}], "result": OK}],
            0,
            0,
            "exactly one of",
        ),
        (OK, None, [{"equals": {"a": 1}, "bogus": 1, "result": OK}], 0, 0, "unknown keys"),
        (OK, None, [], -1, 0, "delay"),
        (OK, None, [], 0, 5000, "progress steps"),
    ],
)
def test_bad_configurations_are_refused(result, error, cases, delay, steps, message):
    with pytest.raises(ValueError, match=message):
        validate_static_config(result, error, cases, delay, steps)
