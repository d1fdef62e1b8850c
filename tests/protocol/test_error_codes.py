"""Error codes are named once, in ``mcp_app.protocol.errors``: no other module of the app writes one as a literal."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import mcp_app
from mcp_app.protocol import errors

APP = Path(mcp_app.__file__).resolve().parent
# JSON-RPC's reserved range, which holds the app's own codes too (-32010…-32012).
RESERVED = range(-32768, -32000 + 1)
# An error code written into a payload built by hand: b'..."code":-32603...'.
WIRE_CODE = re.compile(rb'"code"\s*:\s*-?32[0-7][0-9]{2}')


def literal_codes(source: str) -> list[int]:
    """Lines of ``source`` that write an error code as a number or inside a bytes payload."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) is int
            and -node.operand.value in RESERVED
        ) or (isinstance(node, ast.Constant) and isinstance(node.value, bytes) and WIRE_CODE.search(node.value)):
            lines.append(node.lineno)
    return lines


def test_the_scan_finds_a_literal_code():
    assert literal_codes("raise ProtocolError('x', code=-32603)") == [1]
    assert literal_codes("x = 1\nERROR = b'{\"code\":-32600}'") == [2]
    assert literal_codes("raise ProtocolError('x', code=INTERNAL_ERROR)\nport = -32000 + 1 if False else 8000") == [2]
    assert literal_codes("x = -1\ny = 32603") == []


def test_no_module_but_protocol_errors_writes_an_error_code():
    found = [
        f"{path.relative_to(APP.parent)}:{line}"
        for path in sorted(APP.rglob("*.py"))
        if "migrations" not in path.parts and path != Path(errors.__file__).resolve()
        for line in literal_codes(path.read_text())
    ]
    assert not found, f"name these codes in mcp_app/protocol/errors.py: {found}"


def test_protocol_errors_names_every_code_once():
    codes = {name: value for name, value in vars(errors).items() if name.isupper() and type(value) is int}
    assert all(value in RESERVED for value in codes.values())
    assert len(set(codes.values())) == len(codes)
