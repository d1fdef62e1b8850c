"""List pages end at their count or their bytes, whichever comes first, and always advance."""

from __future__ import annotations

from typing import Any

import orjson

from mcp_app.protocol.pagination import page


def entries(*sizes: int) -> list[dict[str, Any]]:
    return [{"name": f"t{index}", "description": "x" * size} for index, size in enumerate(sizes)]


def every_page(items: list[dict[str, Any]], size: int, max_bytes: int | None) -> list[list[str]]:
    pages, params = [], {}
    while True:
        found = page(items, params, size, "tools", max_bytes)
        pages.append([item["name"] for item in found["tools"]])
        if "nextCursor" not in found:
            return pages
        params = {"cursor": found["nextCursor"]}


def test_a_page_ends_before_its_items_pass_the_byte_bound() -> None:
    items = entries(100, 100, 100, 100, 100)
    one = len(orjson.dumps(items[0]))

    assert every_page(items, 100, 2 * one) == [["t0", "t1"], ["t2", "t3"], ["t4"]]


def test_an_item_larger_than_the_bound_is_a_page_of_its_own() -> None:
    assert every_page(entries(10, 5000, 10), 100, 1000) == [["t0"], ["t1"], ["t2"]]


def test_the_count_still_bounds_and_no_byte_bound_pages_by_count_only() -> None:
    items = entries(*[10] * 5)

    assert every_page(items, 2, 1_000_000) == [["t0", "t1"], ["t2", "t3"], ["t4"]]
    assert every_page(items, 2, None) == [["t0", "t1"], ["t2", "t3"], ["t4"]]
