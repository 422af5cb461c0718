"""FileList from columns: lists, numpy arrays and Arrow arrays of paths
give one table, built with no Python object per sample; from_csv reads
with pyarrow's CSV reader and without it alike."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest
import ringloader
from ringloader.datasets.cache import StringBlob
from ringloader.datasets.filelist import FileList
from batches import assert_same as _same
from test_filelist import _batches


def _reference(folder):
    ref = ringloader.ImageFolder(folder)
    paths = [p for p, _ in ref.samples]
    return paths, np.asarray(ref.targets, dtype=np.int64)


def _forms(paths: list[str]) -> dict:
    """The same paths in every form FileList takes."""
    wide = pa.array(["junk"] * 3 + paths + ["junk"] * 2)
    half = len(paths) // 2
    return {
        "list": paths,
        "tuple": tuple(paths),
        "pathlib": [pathlib.Path(p) for p in paths],
        "numpy U": np.array(paths),
        "numpy S": np.array([os.fsencode(p) for p in paths]),
        "numpy object": np.array(paths, dtype=object),
        "arrow": pa.array(paths),
        "arrow large_string": pa.array(paths, pa.large_string()),
        "arrow binary": pa.array([os.fsencode(p) for p in paths], pa.binary()),
        "arrow slice": wide.slice(3, len(paths)),
        "arrow chunked": pa.chunked_array(
            [wide.slice(3, half), pa.array(paths[half:]), pa.array([], pa.string())]
        ),
    }


def test_every_form_of_paths_and_labels_gives_one_table(folder):
    paths, labels = _reference(folder)
    want = _batches(FileList(paths, labels))
    label_forms = [labels, labels.tolist(), pa.array(labels), pa.array(labels)[0:]]
    for i, (name, form) in enumerate(_forms(paths).items()):
        ours = FileList(form, label_forms[i % len(label_forms)])
        assert list(ours.paths) == paths, name
        assert ours.targets.dtype == np.int64, name
        np.testing.assert_array_equal(ours.targets, labels)
        assert list(ours.samples) == list(zip(paths, labels.tolist())), name
        if not name.startswith("arrow"):
            # The folder is kept once, not per path.
            assert ours.paths.prefix == os.path.join(folder, ""), name
        _same(_batches(ours), want)


def test_non_ascii_and_surrogate_escaped_names_round_trip(folder, tmp_path):
    jpeg = _reference(folder)[0][0]
    names = ["été/ü.jpg", "plain/a.jpg", os.fsdecode(b"raw/\xff\xfe.jpg")]
    paths = [str(tmp_path / n) for n in names]
    for p in paths:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        shutil.copy(jpeg, p)
    want = _batches(FileList([paths[1]] * 3, [0, 1, 2]))
    forms = {
        "list": paths,
        "numpy U": np.array(paths),
        "numpy S": np.array([os.fsencode(p) for p in paths]),
        "numpy object": np.array(paths, dtype=object),
    }
    for name, form in forms.items():
        ours = FileList(form, [0, 1, 2])
        assert list(ours.paths) == paths, name
        assert [os.fsencode(p) for p in ours.paths] == [os.fsencode(p) for p in paths]
        _same(_batches(ours), want)  # the C core opened every name
    utf8 = FileList(pa.array(paths[:2]), [0, 1])  # Arrow strings are UTF-8
    assert list(utf8.paths) == paths[:2]


def test_nul_bytes_and_nulls_are_refused_naming_the_row():
    paths = ["/d/a.jpg", "/d/b.jpg", "/d/c\0.jpg", "/d/e.jpg"]
    for form in (
        paths,
        np.array(paths),
        np.array([os.fsencode(p) for p in paths]),
        pa.array(paths),
        pa.array(["x"] + paths).slice(1),
    ):
        with pytest.raises(ValueError, match=r"FileList paths: row 2 holds a NUL"):
            FileList(form, [0, 1, 2, 3])
    nulls = pa.array(["/d/x.jpg", "/d/a.jpg", None, "/d/c.jpg"])
    for form in (nulls, nulls.slice(1), pa.chunked_array([nulls.slice(0, 2), nulls])):
        row = 2 if len(form) == 4 else (1 if len(form) == 3 else 4)
        with pytest.raises(ValueError, match=rf"FileList paths: row {row} is null"):
            FileList(form, np.zeros(len(form), np.int64))
    with pytest.raises(ValueError, match=r"FileList labels: row 1 is null"):
        FileList(paths[:2], pa.array([3, None]))


def test_local_and_remote_paths_cannot_be_mixed():
    paths = ["/data/a.jpg", "HTTPS://host/b.jpg"]
    for form in (paths, np.array(paths), pa.array(paths), paths[::-1]):
        with pytest.raises(ValueError, match="cannot be\\s+mixed"):
            FileList(form, [0, 1])
    for urls in (["s3://b/k/a.jpg", "s3://b/k/c.jpg"], ["http://h/a", "Https://h/b"]):
        assert FileList(np.array(urls), [0, 1]).client is not None
    local = FileList(["http:a.jpg", "s3/x.jpg", "/http://x.jpg"], [0, 1, 2])
    assert local.client is None


# CSV files whose reading is tested with pyarrow and without it: (text,
# from_csv's keyword arguments, the paths relative to the CSV's folder, or
# as they are when absolute or URLs, and the labels), or the error's text.
CSVS = {
    "plain": ("a.jpg,1\nb/c.jpg,2\n", {}, ["a.jpg", "b/c.jpg"], [1, 2]),
    "header, blank lines, spaces": (
        "path , label\n\n a.jpg , 3 \n\n\nb.jpg,4\n\n",
        {},
        ["a.jpg", "b.jpg"],
        [3, 4],
    ),
    "quotes, extra and uneven columns": (
        'path,label,note\n"x, y.jpg",5,"n"\n"q""uote.jpg",6\nz.jpg,7,a,b\n',
        {},
        ["x, y.jpg", 'q"uote.jpg', "z.jpg"],
        [5, 6, 7],
    ),
    "a newline in quotes": (
        '"two\nlines.jpg",1\nb.jpg,2\n',
        {},
        ["two\nlines.jpg", "b.jpg"],
        [1, 2],
    ),
    "floats": ("a.jpg,1\nb.jpg,2.5\n", {}, ["a.jpg", "b.jpg"], [1.0, 2.5]),
    "k columns": (
        "f,a,b,c\na.jpg,1,0,1\nb.jpg,0,1,0\n",
        {"label_columns": 3},
        ["a.jpg", "b.jpg"],
        [[1, 0, 1], [0, 1, 0]],
    ),
    "k columns, floats": (
        "a.jpg,0.25,0.75\nb.jpg,1,0\n",
        {"label_columns": 2},
        ["a.jpg", "b.jpg"],
        [[0.25, 0.75], [1.0, 0.0]],
    ),
    "labels only Python reads": (
        "a.jpg,1_000\nb.jpg, +2\n",
        {},
        ["a.jpg", "b.jpg"],
        [1000, 2],
    ),
    "absolute and relative rows": (
        "/abs/a.jpg,1\nrel.jpg,2\n",
        {},
        ["/abs/a.jpg", "rel.jpg"],
        [1, 2],
    ),
    "URL root": (
        "a.jpg,1\nsub/b.jpg,2\n",
        {"root": "s3://bucket/pre"},
        ["s3://bucket/pre/a.jpg", "s3://bucket/pre/sub/b.jpg"],
        [1, 2],
    ),
    "URL rows": (
        "path,label\nhttp://h/a.jpg,1\nHTTP://h/b.jpg,2\n",
        {"root": "/unused"},
        ["http://h/a.jpg", "HTTP://h/b.jpg"],
        [1, 2],
    ),
    "empty": ("", {}, [], []),
    "header only": ("path,label\n", {}, [], []),
    "bad label": (
        "path,label\na.jpg,1\n\nb.jpg,two\n",
        {},
        "line 4: label 'two' is not a number",
    ),
    "blank label": ("a.jpg,1\nb.jpg,\n", {}, "line 2: label '' is not a number"),
    "too few labels": (
        "a.jpg,1,2\nb.jpg,3\n",
        {"label_columns": 2},
        "line 2: expected path and 2 labels",
    ),
}

_READ = """
import json, sys
if sys.argv[1] == "absent":
    sys.modules["pyarrow"] = None  # as when pyarrow is not installed
from ringloader.datasets.cache import StringBlob
from ringloader.datasets.filelist import FileList
out = {}
for name, (path, kw) in json.loads(sys.argv[2]).items():
    try:
        fl = FileList.from_csv(path, **kw)
        out[name] = [list(fl.paths), fl.targets.tolist(), str(fl.targets.dtype)]
    except ValueError as e:
        out[name] = str(e)
print(json.dumps(out))
"""


def _read_all(which: str, files: dict) -> dict:
    got = subprocess.run(
        [sys.executable, "-c", _READ, which, json.dumps(files)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(got.stdout)


def test_from_csv_reads_alike_with_and_without_pyarrow(tmp_path):
    files = {}
    for i, (name, case) in enumerate(CSVS.items()):
        path = tmp_path / f"{i}.csv"
        path.write_text(case[0], encoding="utf-8")
        files[name] = (str(path), case[1])
    with_arrow, without = _read_all("present", files), _read_all("absent", files)
    for name, case in CSVS.items():
        assert with_arrow[name] == without[name], name
        if isinstance(case[2], str):
            assert case[2] in with_arrow[name], name
            continue
        where = case[1].get("root", str(tmp_path))
        paths = [
            p if "://" in p or p.startswith("/") else f"{where}/{p}" for p in case[2]
        ]
        dtype = (
            "float64"
            if any(isinstance(v, float) for v in np.ravel(case[3]))
            else "int64"
        )
        assert with_arrow[name] == [paths, case[3], dtype], name


def test_from_csv_keeps_the_root_once(folder, tmp_path):
    paths, labels = _reference(folder)
    rel = [os.path.relpath(p, folder) for p in paths]
    csv = tmp_path / "list.csv"
    csv.write_text("".join(f"{p},{t}\n" for p, t in zip(rel, labels)))
    ours = FileList.from_csv(csv, root=folder)
    assert ours.paths.prefix == os.path.join(folder, "")
    assert list(ours.paths) == paths
    _same(_batches(ours), _batches(FileList(paths, labels)))


def test_a_csv_named_relative_to_the_working_folder_keeps_its_folder(
    folder, tmp_path, monkeypatch
):
    """The rows are relative to the CSV's folder, wherever the process
    goes after the dataset is made (a training script that changes folder
    into its output directory)."""
    paths, labels = _reference(folder)
    rel = [os.path.relpath(p, folder) for p in paths]
    (pathlib.Path(folder) / "list.csv").write_text(
        "".join(f"{p},{t}\n" for p, t in zip(rel, labels))
    )
    monkeypatch.chdir(folder)
    ours = FileList.from_csv("list.csv")
    monkeypatch.chdir(tmp_path)
    assert list(ours.paths) == paths
    _same(_batches(ours), _batches(FileList(paths, labels)))


@pytest.mark.parametrize("form", ["list", "numpy", "arrow"])
def test_a_million_paths_keep_no_python_object_per_sample(form):
    n = 1_000_000
    paths: object = [f"/data/train/{i % 1000:04d}/{i:08d}.jpg" for i in range(n)]
    if form == "numpy":
        paths = np.array(paths)
    elif form == "arrow":
        paths = pa.array(paths)
    labels = (np.arange(n) % 1000).tolist()  # made int64 targets inside
    tracemalloc.start()
    try:
        ours = FileList(paths, labels)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(ours) == n and ours.paths[n - 1] == f"/data/train/0999/{n - 1:08d}.jpg"
    # A str per path would be 60 bytes or more; the blob holds 17 bytes
    # of each path (its folder once), an 8-byte offset and the int64
    # label (an Arrow column's buffers are its own: only the offsets).
    assert kept / n < 40, (kept / n, peak / n)
    # The temporaries are arrays the size of the text, not objects.
    assert peak / n < 200, (kept / n, peak / n)


def test_the_common_folder_is_kept_once():
    many = [f"/a/b/c/{i}.jpg" for i in range(10_000)]
    odd = many.copy()
    odd[5_001] = "/a/x/c/odd.jpg"  # between the items a sample looks at
    cases = [
        (many, "/a/b/c/"),
        (odd, "/a/"),
        (["/a/b/", "/a/b/c.jpg", "/a/b/"], "/a/b/"),  # an item is the folder
        (["/a/b/x.jpg"], "/a/b/"),
        (["rel/a.jpg", "rel2/b.jpg"], ""),
        (["/é/ü/1.jpg", "/é/ü/2.jpg", "/é/v.jpg"], "/é/"),
        (["", "/a/b.jpg"], ""),
    ]
    for items, prefix in cases:
        for form in (items, np.array(items), np.array(items, dtype=object)):
            blob = StringBlob.of_paths(form)
            assert blob.prefix == prefix, (items[:3], type(form))
            assert list(blob) == items
            assert len(blob.blob) == sum(len(os.fsencode(s)) for s in items) - len(
                os.fsencode(prefix)
            ) * len(items)
