"""TarShards(fields=...): a shard sample's caption, JSON, class and array
members read with its image (one read, one range GET) and batched as
WebDataset's to_tuple + batched() gives them. Shards are written by
webdataset's ShardWriter and read back by webdataset itself, locally, over
HTTP (nginx) and S3 (moto's server); bad members fail naming shard and
sample, or are skipped and counted."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile

import numpy as np
import pytest
import ringloader
import torch
from images import jpeg_bytes
from ringloader import transforms as T
from ringloader.datasets.shards import ShardError, TarShards
from rlbench.servers import MotoS3, Nginx, find_nginx

wds = pytest.importorskip("webdataset")

EVAL = T.Compose([T.Resize(40), T.CenterCrop(32)])
TRAIN = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip()])
N = 30  # samples, over 3 shards
FIELDS = ("jpg;png", "txt", "json", "cls")


def _caption(i: int) -> str:
    return f"a photo of thing {i} – «{'é' * (i % 4)}»"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Three shards of N samples (jpg, txt, json, cls, and an unused .npy),
    written by webdataset's ShardWriter."""
    root = tmp_path_factory.mktemp("fields")
    with wds.ShardWriter(str(root / "s-%03d.tar"), maxcount=10, verbose=0) as w:
        for i in range(N):
            w.write(
                {
                    "__key__": f"sample{i:05d}",
                    "jpg": jpeg_bytes("baseline", 40 + i, 60 + 2 * i, seed=i),
                    "txt": _caption(i),
                    "json": {"i": i, "tags": ["a", "b"][: i % 3], "score": i / 7},
                    "cls": i % 5,
                    "npy": np.arange(3, dtype=np.float32) + i,
                }
            )
    return root


def _urls(root) -> list[str]:
    return [str(root / f"s-{s:03d}.tar") for s in range(3)]


def _webdataset(root) -> list[tuple]:
    """What webdataset yields for the shards, sample by sample."""
    ds = wds.WebDataset(_urls(root), shardshuffle=False).decode()
    return list(ds.to_tuple("txt", "json", "cls"))


def _read(ds, **kw) -> tuple[torch.Tensor, list, list, list, dict]:
    loader = ringloader.Loader(ds, batch_size=8, transform=EVAL, num_threads=2, **kw)
    images, texts, objs, classes = [], [], [], []
    for x, txt, obj, cls in loader:
        assert isinstance(txt, list) and isinstance(obj, list)
        assert cls.dtype == torch.int64
        images.append(x.clone())
        texts += txt
        objs += obj
        classes += cls.tolist()
    stats = loader.stats()
    loader.close()
    return torch.cat(images), texts, objs, classes, stats


def _same_as_webdataset(root, ds) -> None:
    _, texts, objs, classes, _ = _read(ds)
    expected = _webdataset(root)
    assert len(expected) == N
    assert texts == [e[0] for e in expected]
    assert objs == [e[1] for e in expected]
    assert classes == [e[2] for e in expected]


def test_fields_equal_webdataset_locally(shards):
    ds = TarShards(_urls(shards), fields=FIELDS, progress=False)
    _same_as_webdataset(shards, ds)
    # One sample by indexing: the same values, the image as without fields.
    image, txt, obj, cls = ds[7]
    assert (txt, obj, cls) == tuple(_webdataset(shards)[7])
    assert torch.equal(image, TarShards(_urls(shards), progress=False)[7][0])


def test_images_are_those_without_fields(shards):
    """Pixels as today: the same crops, flips and bytes with and without
    fields, shuffled and augmented."""
    plain = TarShards(_urls(shards), progress=False)
    with_fields = TarShards(_urls(shards), fields=FIELDS, progress=False)
    a = ringloader.Loader(plain, batch_size=8, shuffle=True, transform=TRAIN, seed=3)
    b = ringloader.Loader(
        with_fields, batch_size=8, shuffle=True, transform=TRAIN, seed=3
    )
    for (xa, ya), (xb, _, _, yb) in zip(a, b, strict=True):
        assert torch.equal(xa, xb)
        assert torch.equal(ya, yb)  # the .cls field is the label
    assert b.stats()["bytes_read"] > a.stats()["bytes_read"]  # the members came


def test_tuple_order_field_transforms_and_label_field(shards):
    calls = []

    def tokenize(texts: list[str]) -> torch.Tensor:
        calls.append(list(texts))
        return torch.tensor([len(t) for t in texts])

    ds = TarShards(
        _urls(shards),
        fields=("json", "txt", "jpg"),
        field_transforms={"txt": tokenize},
        progress=False,
    )
    obj, lengths, x = next(iter(ringloader.Loader(ds, batch_size=8, transform=EVAL)))
    assert x.shape == (8, 3, 32, 32)
    assert [o["i"] for o in obj] == list(range(8))
    assert calls == [[_caption(i) for i in range(8)]]  # once, on the list
    assert lengths.tolist() == [len(_caption(i)) for i in range(8)]
    # A label read as a field: float vectors from .npy, target_transform
    # on each sample as torch's DataLoader would run it.
    vec = TarShards(
        _urls(shards), label_key="npy", target_transform=lambda t: t * 2, progress=False
    )
    x, y = next(iter(ringloader.Loader(vec, batch_size=4, transform=EVAL)))
    assert y.dtype == torch.float32 and y.shape == (4, 3)
    expected = torch.stack([(torch.arange(3.0) + i) * 2 for i in range(4)])
    assert torch.equal(y, expected)
    with pytest.raises(ValueError, match="exactly one image field"):
        TarShards(_urls(shards), fields=("txt", "json"), progress=False)
    with pytest.raises(ValueError, match="field_transforms names 'text'"):
        TarShards(
            _urls(shards), fields=FIELDS, field_transforms={"text": str}, progress=False
        )


def test_dataloader_dropin_and_multiview(shards):
    """ringloader.DataLoader yields the fields as Loader does; a MultiView
    gives its views in the image's place."""
    ds = TarShards(_urls(shards), fields=("jpg", "txt"), transform=EVAL, progress=False)
    loader = ringloader.DataLoader(ds, batch_size=5, num_workers=2)
    assert isinstance(loader, ringloader.DataLoader)
    x, txt = next(iter(loader))
    assert x.shape == (5, 3, 32, 32) and txt == [_caption(i) for i in range(5)]
    views = T.MultiView(EVAL, TRAIN)
    (a, b), txt = next(iter(ringloader.Loader(ds, batch_size=4, transform=views)))
    assert a.shape == (4, 3, 32, 32) and b.shape == (4, 3, 24, 24)
    assert txt == [_caption(i) for i in range(4)]
    with pytest.raises(LookupError):
        TarShards(_urls(shards), fields=("jpg", "txt"), errors="bogus", progress=False)


DEVICE = """
import glob
urls = sorted(glob.glob(os.environ["FIELDS_SHARDS"] + "/s-*.tar"))
ds = ringloader.TarShards(urls, fields=("jpg", "txt", "json", "cls"), progress=False)
kw = dict(batch_size=8, transform=tf, seed=1, shuffle=True)
ref = [(x.clone(), t, j, c) for x, t, j, c in ringloader.Loader(ds, **kw)]
gpu = ringloader.Loader(ds, device="cuda", num_threads=2, prefetch=3, **kw)
bad = 0
for (b, t, j, c), (a, t2, j2, c2) in zip(gpu, ref, strict=True):
    gpu._gpu.synchronize()
    bad += not (torch.equal(a, b.clone()) and t == t2 and j == j2 and torch.equal(c, c2))
gpu.close()
del b
report(bad=bad, batches=len(ref))
"""


def test_fields_on_the_device(shards, tmp_path):
    """The GPU path (the fake CUDA runtime of test_cuda_fake): the images
    on the device, the fields with them, as on the host."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cuda"))
    import fake_gpu
    from test_cuda_fake import run

    fake = fake_gpu.build(str(tmp_path / "fake_cudart.so"))
    folder = tmp_path / "folder"  # what run()'s prelude opens, unused here
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "x.jpg").write_bytes(jpeg_bytes("baseline", 8, 8, seed=0))
    r = run(fake, str(folder), DEVICE, FAKE_CUDA_DELAY_US=5000, FIELDS_SHARDS=shards)
    assert r["bad"] == 0 and r["violations"] == 0 and r["batches"] == 4, r
    assert r["host"] == 0 and r["dev"] == 0, r


@pytest.fixture(scope="module")
def nginx(shards):
    if find_nginx() is None:
        pytest.fail("nginx is missing: apt-get install nginx (CI installs it)")
    with Nginx(shards, access_log=True) as server:
        yield server


def test_fields_over_http_one_get_per_sample(shards, nginx, tmp_path):
    url = nginx.url + "/s-{000..002}.tar"
    ds = TarShards(url, fields=FIELDS, cache_dir=tmp_path, progress=False)
    _same_as_webdataset(shards, ds)
    # Shuffled: one range GET per sample at most (neighbours that fall in
    # one batch share one), however many fields it has: as many as reading
    # the images alone, in the same order.
    *_, stats = _read(ds, shuffle=True, seed=1)
    assert stats["http_requests"] <= N
    plain = TarShards(url, cache_dir=tmp_path, progress=False)
    loader = ringloader.Loader(
        plain, batch_size=8, transform=EVAL, shuffle=True, seed=1, num_threads=2
    )
    for _ in loader:
        pass
    assert stats["http_requests"] == loader.stats()["http_requests"]
    # Runs of neighbours: one GET for several samples and all their fields.
    *_, stats = _read(ds, shuffle="runs")
    assert stats["http_requests"] < N / 2
    # The local cache's blocks of neighbours carry the fields as well.
    cached = TarShards(
        url, fields=FIELDS, cache_dir=tmp_path, cache_limit=1 << 30, progress=False
    )
    _same_as_webdataset(shards, cached)


def test_fields_over_s3(shards, tmp_path):
    with MotoS3() as server:
        server.upload(
            "data", {f"s-{s:03d}.tar": p for s, p in enumerate(_urls(shards))}
        )
        ds = TarShards(
            "s3://data/s-*.tar",
            fields=FIELDS,
            cache_dir=tmp_path,
            s3_client=server.client(),
            progress=False,
        )
        _same_as_webdataset(shards, ds)


# ---- bad input ----


def _shard(path, samples: list[dict]) -> str:
    with tarfile.open(path, "w") as tf:
        for s in samples:
            for ext, data in s.items():
                if ext != "__key__":
                    info = tarfile.TarInfo(f"{s['__key__']}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
    return str(path)


def _sample(i: int, **over) -> dict:
    s = {
        "__key__": f"k{i:03d}",
        "jpg": jpeg_bytes("baseline", 32, 32, seed=i),
        "txt": f"caption {i}".encode(),
        "json": json.dumps({"i": i}).encode(),
    }
    s.update(over)
    return {k: v for k, v in s.items() if v is not None}


def _batches(ds, **kw) -> tuple[list, dict]:
    loader = ringloader.Loader(ds, batch_size=4, transform=EVAL, num_threads=1, **kw)
    out = [tuple(b) for b in loader]
    return out, loader.stats()


def test_missing_field_names_shard_and_sample(tmp_path):
    path = _shard(
        tmp_path / "m.tar", [_sample(i, txt=None if i == 2 else b"x") for i in range(8)]
    )
    ds = TarShards(path, fields=("jpg", "txt"), progress=False)
    with pytest.raises(
        ringloader.DecodeError, match=r"no \.txt member.*m\.tar\[k002\]"
    ) as e:
        _batches(ds)
    assert e.value.kind == "field"
    batches, stats = _batches(ds, on_error="skip")
    assert [len(b[1]) for b in batches] == [4, 4]
    texts = [t for b in batches for t in b[1]]
    assert "x" in texts and len(texts) == 8  # k002 replaced by its neighbour
    assert stats["skipped"] == 1 and stats["errors"] == 1


def test_field_over_its_limit(tmp_path):
    path = _shard(
        tmp_path / "big.tar",
        [_sample(i, txt=b"y" * (10 + 40 * (i == 5))) for i in range(8)],
    )
    ds = TarShards(path, fields=("jpg", "txt"), max_field_bytes=32, progress=False)
    with pytest.raises(
        ringloader.DecodeError, match=r"max_field_bytes=32.*big\.tar\[k005\]"
    ):
        _batches(ds)
    _, stats = _batches(ds, on_error="skip")
    assert stats["skipped"] == 1


BAD_TEXT, BAD_JSON, BAD_BOTH = 2, 7, 8  # sample 8: bad text and JSON
M = 12  # samples of the bad shards, 3 batches of 4


@pytest.fixture(scope="module")
def bad_shards(tmp_path_factory):
    """Two shards by webdataset's ShardWriter whose samples 2 (its caption
    not UTF-8), 7 (its JSON cut short) and 8 (both) are bad."""
    root = tmp_path_factory.mktemp("bad")
    with wds.ShardWriter(str(root / "bad-%03d.tar"), maxcount=6, verbose=0) as w:
        for i in range(M):
            txt: bytes | str = _caption(i)
            obj: bytes | dict = {"i": i}
            if i in (BAD_TEXT, BAD_BOTH):
                txt = b"caf\xe9 \xff"
            if i in (BAD_JSON, BAD_BOTH):
                obj = b'{"i": %d,' % i
            w.write(
                {
                    "__key__": f"sample{i:05d}",
                    "jpg": jpeg_bytes("baseline", 40 + i, 60 + 2 * i, seed=i),
                    "txt": txt,
                    "json": obj,
                    "cls": i,
                }
            )
    return [str(root / f"bad-{s:03d}.tar") for s in range(2)]


def test_bad_text_and_json_raise_naming_shard_sample_and_member(bad_shards):
    ds = TarShards(bad_shards, fields=("jpg", "txt", "json"), progress=False)
    with pytest.raises(
        ringloader.DecodeError,
        match=r"bad-000\.tar: its \.txt member is not UTF-8: byte 0xe9 at 3.*"
        r"bad-000\.tar\[sample00002\]",
    ) as e:
        _batches(ds)
    assert e.value.kind == "field"
    ds_json = TarShards(bad_shards, fields=("jpg", "json"), progress=False)
    with pytest.raises(
        ringloader.DecodeError,
        match=r"its \.json member is not valid JSON: .*bad-001\.tar\[sample00007\]",
    ):
        _batches(ds_json)
    with pytest.raises(ringloader.FieldError, match=r"sample00002.*\.txt member"):
        ds[BAD_TEXT]  # by indexing: decoded in Python, the same verdict


def test_bad_text_and_json_skipped_keep_batches_full(bad_shards):
    """on_error="skip": each bad sample is replaced by the next one that
    loads (its image and fields), as a corrupt image is: every batch full,
    counted, the same whatever the thread count."""
    ds = TarShards(bad_shards, fields=("jpg", "txt", "json", "cls"), progress=False)
    loader = ringloader.Loader(
        ds, batch_size=4, transform=EVAL, on_error="skip", num_threads=1
    )
    with pytest.warns(ringloader.DataWarning, match="sample00002"):
        batches = [(x.clone(), t, j, c.clone()) for x, t, j, c in loader]
    assert [len(b[0]) for b in batches] == [4, 4, 4]
    assert [len(b[1]) for b in batches] == [4, 4, 4]
    assert [len(b[2]) for b in batches] == [4, 4, 4]
    classes = [c for b in batches for c in b[3].tolist()]
    # 2 -> 3; 7 (bad JSON) and 8 (bad both) -> 9, the next that loads.
    assert classes == [0, 1, 3, 3, 4, 5, 6, 9, 9, 9, 10, 11]
    texts = [t for b in batches for t in b[1]]
    assert texts == [_caption(i) for i in classes]
    assert [o["i"] for b in batches for o in b[2]] == classes
    images = torch.cat([b[0] for b in batches])
    assert torch.equal(images[2], images[3]) and torch.equal(images[7], images[9])
    stats = loader.stats()
    # Skipped: the three bad samples; errors: those and sample 8 again, a
    # failed candidate for sample 7.
    assert stats["skipped"] == 3 and stats["errors"] == 4
    assert stats["samples_decoded"] == M  # no image decoded for a bad member
    # Shuffled and augmented: bit-identical with 1 and 3 threads.
    runs = []
    for threads in (1, 3):
        shuffled = ringloader.Loader(
            ds,
            batch_size=4,
            transform=TRAIN,
            shuffle=True,
            seed=5,
            on_error="skip",
            num_threads=threads,
        )
        with pytest.warns(ringloader.DataWarning):
            runs.append([(x.clone(), t, j, c.clone()) for x, t, j, c in shuffled])
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a[0], b[0]) and a[1:3] == b[1:3]
        assert torch.equal(a[3], b[3]) and len(a[1]) == 4
    # errors="replace": the text decodes, only the JSON fails.
    lenient = TarShards(
        bad_shards, fields=("jpg", "txt", "cls"), errors="replace", progress=False
    )
    batches, stats = _batches(lenient, on_error="skip")
    assert batches[0][1][BAD_TEXT] == "caf\ufffd \ufffd" and stats["skipped"] == 0


def test_arrays_and_ints_that_do_not_decode(tmp_path):
    good = io.BytesIO()
    np.save(good, np.arange(3, dtype=">f4"))  # big-endian: made native
    samples = [_sample(i, npy=good.getvalue(), cls=b"%d" % i) for i in range(8)]
    samples[1]["npy"] = b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4',"  # cut header
    samples[2]["cls"] = b"seven"
    samples[5]["cls"] = b"9223372036854775808"  # over int64: no tensor holds it
    samples[3]["txt"] = b"1" * 30  # a caption of digits: indexed as text
    path = _shard(tmp_path / "arr.tar", samples)
    # Integers are checked in the core: replaced like bad text.
    ints = TarShards(path, fields=("jpg", "cls"), progress=False)
    with pytest.raises(
        ringloader.DecodeError,
        match=r"\.cls member is not an integer.*arr\.tar\[k002\]",
    ):
        _batches(ints)
    with pytest.warns(ringloader.DataWarning):
        batches, stats = _batches(ints, on_error="skip")
    assert [c for b in batches for c in b[1].tolist()] == [0, 1, 3, 3, 4, 6, 6, 7]
    assert stats["skipped"] == 2
    assert TarShards(path, fields=("jpg", "txt"), progress=False)[3][1] == "1" * 30
    # An .npy member is decoded in Python only, after the batch is made: a
    # FieldError naming it, even under on_error="skip" (never a short batch).
    ds = TarShards(path, fields=("jpg", "npy"), progress=False)
    for on_error in ("raise", "skip"):
        with pytest.raises(
            ringloader.FieldError, match=r"arr\.tar\[k001\].*\.npy member is not"
        ) as e:
            _batches(ds, on_error=on_error)
        assert e.value.kind == "field" and e.value.index == 1 and e.value.field == "npy"
    assert torch.equal(ds[0][1], torch.arange(3.0))  # native byte order


def test_shard_error_by_indexing(tmp_path):
    path = _shard(
        tmp_path / "m.tar", [_sample(i, txt=None if i == 0 else b"x") for i in range(2)]
    )
    ds = TarShards(path, fields=("jpg", "txt"), progress=False)
    with pytest.raises(ShardError, match=r"k000.*no \.txt member"):
        ds[0]
    assert ds[1][1] == "x"


def test_members_before_and_after_the_image(tmp_path):
    """Members on either side of the image in the tar, tar headers between
    them, other members not asked for: each field is cut at its place."""
    samples = []
    for i in range(6):
        s = {"__key__": f"k{i:03d}", "json": json.dumps({"i": i}).encode()}
        s["seg.png"] = b"not asked for" * i
        s["jpg"] = jpeg_bytes("baseline", 32, 32, seed=i)
        s["txt"] = f"after {i}".encode() if i % 2 else b""
        s["id"] = f" {100 + i}\n".encode()
        samples.append(s)
    path = _shard(tmp_path / "order.tar", samples)
    ds = TarShards(path, fields=("json", "jpg", "txt", "id"), progress=False)
    (obj, x, txt, ids), *_ = _batches(ds)[0]
    assert [o["i"] for o in obj] == [0, 1, 2, 3]
    assert txt == ["", "after 1", "", "after 3"]
    assert ids.tolist() == [100, 101, 102, 103] and x.shape == (4, 3, 32, 32)
    expected = list(
        wds.WebDataset(path, shardshuffle=False).decode().to_tuple("json", "txt", "id")
    )
    got = [ds[i][:1] + ds[i][2:] for i in range(6)]
    assert got == [tuple(e) for e in expected]


def test_subset_of_shards_with_fields_is_refused(shards):
    ds = TarShards(_urls(shards), fields=FIELDS, progress=False)
    with pytest.raises(TypeError, match="fields"):
        ringloader.Loader(
            torch.utils.data.Subset(ds, [0, 1]), batch_size=2, transform=EVAL
        )


def test_copy_of_shards_reads_the_same(shards, tmp_path):
    """Sidecar indexes made before fields were asked for serve them."""
    for p in _urls(shards):
        shutil.copy(p, tmp_path)
    TarShards(str(tmp_path / "*.tar"), progress=False)
    ds = TarShards(str(tmp_path / "*.tar"), fields=FIELDS, progress=False)
    _same_as_webdataset(shards, ds)
