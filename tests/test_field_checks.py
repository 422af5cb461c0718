"""The C core's checks of a shard sample's members (core/fields.h), which
refuse a sample before its batch is made, held to what Python accepts on
the same bytes: JSON to json.loads(bytes) (as webdataset decodes it), text
to bytes.decode("utf-8"), integers to int(bytes) within int64. A tricky
list written out by hand, then many documents mutated from it with a fixed
seed. Through the test build's _core.check_member."""

from __future__ import annotations

import json
import random
import sys

import pytest
from ringloader import _core

if not hasattr(_core, "check_member"):
    pytest.fail("a test build is needed (RINGLOADER_TEST_HOOKS=1 pip install .)")

UTF8, JSON, INT = 1, 2, 3
DIGITS = sys.get_int_max_str_digits()
DEPTH = 512  # RL_JSON_MAX_DEPTH

TRICKY = [
    b"",
    b" ",
    b"0",
    b"-0",
    b"01",
    b"-",
    b"1.",
    b".5",
    b"1.5e",
    b"1e+",
    b"1E-7",
    b"1e5.",
    b"+1",
    b"0x10",
    b"1" * DIGITS,
    b"1" * (DIGITS + 1),
    b"-" + b"1" * (DIGITS + 1),
    b"1" * (DIGITS + 1) + b".0",
    b"1" * (DIGITS + 1) + b"e1",
    b"NaN",
    b"-NaN",
    b"Infinity",
    b"-Infinity",
    b"-Inf",
    b"nan",
    b"true",
    b"True",
    b"nulll",
    b"nul",
    b' \t\n\r"x" \r\n',
    b'\x0c"x"',
    b'\xa0"x"',
    b'"x"\x00',
    b'"a\tb"',
    b'"a\x7fb"',
    b'"\\u00e9"',
    b'"\\ud800"',
    b'"\\udc00\\ud800"',
    b'"\\ud83d\\ude00"',
    b'"\\ud83d\\u12"',
    b'"\\uD83D"',
    b'"\\U00e9"',
    b'"\\x41"',
    b'"\\/\\b\\f\\n\\r\\t\\"\\\\"',
    b'"\\',
    b'"abc',
    b'"\xc3\xa9"',
    b'"\xe9"',
    b'"\xed\xa0\x80"',  # an encoded surrogate: json passes it
    b'"\xed\xa0"',
    b'"\xc0\xaf"',
    b'"\xf4\x90\x80\x80"',
    b'"\xf0\x9f\x98\x80"',
    b"{}",
    b"[]",
    b"[ ]",
    b"[1,]",
    b"[,1]",
    b"[1 2]",
    b"[1,,2]",
    b'{"a":1,}',
    b'{"a" : 1 , "b" :[ ] }',
    b"{1:2}",
    b"{'a':1}",
    b'{"a"}',
    b'{"a":}',
    b'{"a":1 "b":2}',
    b'{"a":1}}',
    b"[[[]]",
    b"[1]x",
    b"[1] [2]",
    b"\xef\xbb\xbf[1]",
    b"\xef\xbb\xbf\xef\xbb\xbf[1]",
    b"\xef\xbb",
    "[1]".encode("utf-16"),
    "[1]".encode("utf-16-le"),
    "[1]".encode("utf-16-be"),
    "[1]".encode("utf-32"),
    "[1]".encode("utf-32-le"),
    "[1]".encode("utf-32-be"),
    '["é", "\U0001f600"]'.encode("utf-16-le"),
    '["\ud800"]'.encode("utf-16-be", "surrogatepass"),
    '["\ud800"]'.encode("utf-32", "surrogatepass"),
    "[1]".encode("utf-16-le") + b"\x00",
    "[1]".encode("utf-32-be")[:-1],
    b"1\x00",
    b"\x001",
    b"1\x00\x00\x00",
    b"1\x00\x00",
    b'"\x00\x00\x00',
    b"\xff\xfe\x00\x00\x00\x00\x11\x00",
    b"[" * DEPTH + b"]" * DEPTH,
    b'{"a":' * (DEPTH - 1) + b"[]" + b"}" * (DEPTH - 1),
    b"[" * 300 + b"1," * 5 + b"{}" + b"]" * 300,
]


def json_ok(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is one
        return False
    return True


def check(kind: int, data: bytes):
    return _core.check_member(kind, data, DIGITS)


@pytest.mark.parametrize("data", TRICKY)
def test_json_check_agrees_with_json_loads(data):
    why = check(JSON, data)
    assert (why is None) == json_ok(data), (data, why)


def test_json_nested_past_the_bound_is_refused():
    """Deeper than RL_JSON_MAX_DEPTH: refused, a fixed bound, where Python
    fails near its recursion limit (depending on its stack)."""
    deep = b"[" * (DEPTH + 1) + b"]" * (DEPTH + 1)
    assert "nested deeper than 512" in check(JSON, deep)
    assert not json_ok(b"[" * 5000 + b"]" * 5000)
    assert check(JSON, b"[" * 5000 + b"]" * 5000) is not None


def _mutations(seed: int, n: int) -> list[bytes]:
    """Documents made by cutting, doubling, swapping and inserting bytes
    of valid and tricky ones, and re-encoding some as UTF-16/32."""
    rng = random.Random(seed)
    base = [d for d in TRICKY if len(d) < 200] + [
        json.dumps({"k": [1, 2.5, -3e-2, None, True, "é\n"], "x": {"y": []}}).encode(),
        json.dumps(
            ["a\u2028b", "\U0001f600", float("nan")], ensure_ascii=False
        ).encode(),
    ]
    pieces = list(b' \t\n\r[]{},:"\\-+.0123456789eEaflnrstuINy') + [
        0x00,
        0x1F,
        0x80,
        0xC3,
        0xA9,
        0xED,
        0xEF,
        0xFF,
    ]
    out = []
    for _ in range(n):
        d = bytearray(rng.choice(base))
        for _ in range(rng.randint(1, 3)):
            op = rng.randrange(4)
            i = rng.randint(0, len(d))
            if op == 0 and d:
                del d[i % len(d)]
            elif op == 1:
                d.insert(i, rng.choice(pieces))
            elif op == 2 and d:
                d[i % len(d)] = rng.choice(pieces)
            else:
                d[i:i] = d[: rng.randint(0, 4)]
        data = bytes(d)
        if rng.random() < 0.15:
            enc = rng.choice(
                ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"]
            )
            data = data.decode("latin-1").encode(enc)
        out.append(data)
    return out


def test_json_check_agrees_on_mutated_documents():
    docs = _mutations(seed=30, n=20000)
    wrong = [
        (d, check(JSON, d)) for d in docs if (check(JSON, d) is None) != json_ok(d)
    ]
    assert not wrong, wrong[:5]
    valid = sum(json_ok(d) for d in docs)
    assert 1000 < valid < 19000  # both sides of the line are exercised


UTF8_CASES = [
    b"",
    b"plain",
    "é – «»\U0001f600".encode(),
    b"\xef\xbb\xbfbom",
    b"caf\xe9",
    b"\xc0\x80",
    b"\xc2",
    b"\xe0\x9f\x80",
    b"\xed\xa0\x80",  # a surrogate: strict refuses it
    b"\xed\x9f\xbf",
    b"\xf0\x8f\xbf\xbf",
    b"\xf4\x8f\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xf5\x80\x80\x80",
    b"\x80",
    b"a\x00b",
]


def _utf8_ok(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_utf8_check_agrees_with_decode():
    rng = random.Random(7)
    cases = UTF8_CASES + [
        bytes(rng.randrange(256) for _ in range(3)) for _ in range(20000)
    ]
    wrong = [c for c in cases if (check(UTF8, c) is None) != _utf8_ok(c)]
    assert not wrong, wrong[:5]
    assert "byte 0xe9 at 3" in check(UTF8, b"caf\xe9")


INT_CASES = [
    b"7",
    b" 12 \n",
    b"\x0b1\x0c",
    b"+1",
    b"-0",
    b"007",
    b"1_000",
    b"1__0",
    b"_1",
    b"1_",
    b"- 1",
    b"0x10",
    b"1e3",
    b"1.0",
    b"",
    b" ",
    b"seven",
    b"\x1c1",
    b"\xa01",
    b"1\x00",
    b"\xd9\xa1",  # ARABIC-INDIC DIGIT ONE: int(str) takes it, int(bytes) not
    b"9223372036854775807",
    b"-9223372036854775808",
    b"0" * DIGITS + b"1",
]


def _int_ok(data: bytes) -> bool:
    try:
        v = int(data)
    except ValueError:
        return False
    return -(2**63) <= v < 2**63


@pytest.mark.parametrize("data", INT_CASES)
def test_int_check_agrees_with_int(data):
    assert (check(INT, data) is None) == _int_ok(data), data


def test_int_out_of_int64_is_refused():
    assert "int64" in check(INT, b"9223372036854775808")
    assert "int64" in check(INT, b"-9223372036854775809")
    assert int(b"9223372036854775808")  # Python takes it; a tensor cannot
