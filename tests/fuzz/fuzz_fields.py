"""fuzz_fields.py - atheris harness, differential: the C core's checks of
a shard sample's members (csrc/core/fields.c, through the test build's
``_core.check_member``) against Python's decoding of the same bytes, which
is what the loader runs after the batch is made: ``json.loads(bytes)``,
``bytes.decode("utf-8")``, ``int(bytes)`` within int64.

DESIGN: the input's first byte picks the kind (its value mod 3: UTF-8
text, JSON, integer), the rest is the member. The two must agree, except
where the C check refuses by design: JSON nested deeper than 512 (Python's
own bound is its recursion limit, which depends on its stack). A
disagreement is a finding: a member the core lets through that Python
cannot decode would fail a batch already made; one the core refuses that
Python decodes would be skipped for nothing. ASan is not involved (the
extension is not built with it): tests/c and tests/test_field_checks.py
run the checks under the sanitizers and on fixed lists.

Run: python fuzz_fields.py [libFuzzer flags] CORPUS_DIR SEEDS_DIR (needs
atheris and a test build, RINGLOADER_TEST_HOOKS=1).
tests/test_fuzz_regressions.py calls ``one_input`` on the seeds
(make_corpus.py OUT fields) and regressions_fields/ without atheris.
"""

from __future__ import annotations

import json
import sys

from ringloader import _core

KINDS = (1, 2, 3)  # core/fields.h: RL_FIELD_UTF8, _JSON, _INT
DIGITS = sys.get_int_max_str_digits()


def python_accepts(kind: int, data: bytes) -> bool:
    try:
        if kind == 1:
            data.decode("utf-8")
        elif kind == 2:
            json.loads(data)
        else:
            return -(2**63) <= int(data) < 2**63
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return True


def one_input(data: bytes) -> None:
    if not data:
        return
    kind, member = KINDS[data[0] % 3], data[1:]
    why = _core.check_member(kind, member, DIGITS)
    assert why is None or (isinstance(why, str) and why), why
    if why is not None and "nested deeper than" in why:
        return  # a fixed bound of ours, documented
    ok = python_accepts(kind, member)
    assert (why is None) == ok, f"kind {kind}: C says {why!r}, Python {ok}"


def main() -> None:
    import atheris

    if not hasattr(_core, "check_member"):
        sys.exit("a test build is needed (RINGLOADER_TEST_HOOKS=1 pip install .)")
    # Coverage to steer by: neither the C check nor json's C scanner is
    # instrumented, so each JSON input also goes through json's pure
    # Python scanner, instrumented here, whose result is not used: the
    # verdict stays json.loads's.
    import json.decoder
    import json.scanner

    for fn in (
        json.decoder.py_scanstring,
        json.decoder.JSONObject,
        json.decoder.JSONArray,
        json.scanner.py_make_scanner,
    ):
        atheris.instrument_func(fn)  # json came in with ringloader
    shadow = json.decoder.JSONDecoder()
    shadow.parse_string = json.decoder.py_scanstring
    shadow.scan_once = json.scanner.py_make_scanner(shadow)

    def steered(data: bytes) -> None:
        if data and KINDS[data[0] % 3] == 2:
            try:
                shadow.decode(data[1:].decode("utf-8", "surrogatepass"))
            except (ValueError, RecursionError):
                pass
        one_input(data)

    atheris.Setup(sys.argv, steered)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
