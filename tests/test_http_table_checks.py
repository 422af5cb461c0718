"""The HTTP source's table as the binding takes it: names out of shape are
refused before anything reads them, a close() from another thread while
set_urls copies new URLs waits for it, and Python splits an s3:// name
into bucket and key as the C source does, so every path fetches one
object for one name."""

from __future__ import annotations

import numpy as np
import pytest
from ringloader import _core
from ringloader.datasets.cache import StringBlob
from ringloader.datasets.presign import split_s3
from test_remote_records import SPEC

from subproc import run_python


@pytest.mark.parametrize("end", [64, 400_000_000])
def test_names_whose_offsets_run_past_their_bytes_are_refused_when_objects_are_found_by_name(
    end,
):
    # Before: the names were read by their offsets before any check (64:
    # bytes past the blob read, "not among the http names"; 4e8: a crash).
    blob = np.frombuffer(b"http://h/a", np.uint8)
    names = (blob, np.array([0, end], np.int64), "")
    with pytest.raises(ValueError, match=r"http\['names'\].*10 bytes"):
        _core.Pipeline(SPEC, http=dict(names=names, urls={}), paths=["http://h/a"])


def test_starts_giving_more_samples_than_memory_can_hold_are_refused():
    names = StringBlob.from_strings(["http://h/a"])
    http = dict(names=(names.blob, names.offsets, names.prefix), urls={})
    with pytest.raises(ValueError, match="more than memory can hold"):
        _core.Pipeline(SPEC, http=http, starts=np.array([0, 2**61 + 1], np.int64))


CLOSE_DURING_SET_URLS = r"""
import sys, threading, time
sys.path[:0] = sys.argv[1:]
from ringloader import _core
import ringloader
from ringloader.datasets.cache import StringBlob
from test_shards import EVAL

SPEC = ringloader.transforms.compile_transform(EVAL).spec
names = StringBlob.from_strings([f"s3://bkt/k{i:08d}" for i in range(2_000_000)])
bases = {"bkt": "http://127.0.0.1:9/bkt/"}
for attempt in range(3):
    p = _core.Pipeline(SPEC, http=dict(names=(names.blob, names.offsets, names.prefix), urls=bases, objects=None))
    t0 = time.perf_counter(); p.set_urls(bases); took = time.perf_counter() - t0
    out = []
    started = threading.Event()
    def refresh():
        started.set()
        try:
            p.set_urls(bases)
            out.append("returned")
        except RuntimeError as e:
            out.append(str(e))
    t = threading.Thread(target=refresh); t.start()
    started.wait(); time.sleep(took / 3)
    p.close()
    t.join()
    assert p.closed and out in (["returned"], ["the loader is closed"]), out
print("survived")
"""


def test_close_from_another_thread_waits_for_set_urls(tmp_path):
    # Before: close() freed the source while set_urls, the GIL released,
    # still read its names: garbage in the message, or a segfault (rc -11).
    import os

    tests = os.path.dirname(__file__)
    r = run_python(CLOSE_DURING_SET_URLS, tests, timeout=300)
    assert r.returncode == 0 and "survived" in r.stdout, (
        r.returncode,
        r.stdout,
        r.stderr[-2000:],
    )


@pytest.mark.parametrize(
    "name, bucket, key",
    [
        ("s3://bkt/trailing?", "bkt", "trailing?"),
        ("s3://bkt/tab\there", "bkt", "tab\there"),
        ("s3://bkt/cr\rlf\nx", "bkt", "cr\rlf\nx"),
        ("s3://bkt//a?b#c", "bkt", "a?b#c"),
        ("s3://bkt?q/k", "bkt", "?q/k"),
        ("s3://bkt#f", "bkt", "#f"),
    ],
)
def test_python_splits_an_s3_name_as_the_c_source_does(name, bucket, key):
    # The C source (source/http_urls.c) splits a name literally: the bucket
    # up to the first '/', '?' or '#', the key the rest, leading '/'
    # dropped. Before, Python's split (urlsplit) dropped tabs, line breaks
    # and a trailing '?', so a presigned URL (or a composition's) named
    # another object than the one C fetched for the same name.
    assert split_s3(name) == (bucket, key)
