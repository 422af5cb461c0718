"""The error policy: on_error="raise" | "skip", the consecutive-failure
limit, and allow_truncated's counted warning."""

import hashlib
import warnings

import numpy as np
import pytest
import torch

import ringloader
from ringloader import transforms as T

from images import jpeg_bytes, write_jpegs

TRAIN = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip()])


class Indexed:
    """Samples whose target is their own index, so labels show which
    sample filled each place."""

    def __init__(self, paths):
        self.samples = [(p, i) for i, p in enumerate(paths)]

    def __len__(self):
        return len(self.samples)


def bad_files(d):
    """One of each way a sample can fail."""
    good = jpeg_bytes("s420", 90, 120, seed=99)
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40  # PNG magic, Pillow cannot read it
    (d / "dir.jpg").mkdir()
    files = {
        "corrupt.jpg": b"\xff\xd8\xff\xe0 not really a jpeg" * 3,
        "truncated.jpg": good[: len(good) // 2],
        "empty.jpg": b"",
        "png.jpg": png,
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    return [str(d / n) for n in files] + [str(d / "missing.jpg"), str(d / "dir.jpg")]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """20 good images with the six kinds of bad sample at 2, 5, 6 (two in a
    row), 11, 17 and 19 (the last: its replacement wraps to index 0)."""
    d = tmp_path_factory.mktemp("on_error")
    paths = []
    for i in range(20):
        p = d / f"{i:02d}.jpg"
        p.write_bytes(jpeg_bytes("baseline", 70 + i, 90, seed=i))
        paths.append(str(p))
    bad = bad_files(d)
    for pos, path in zip([2, 5, 6, 11, 17, 19], bad):
        paths[pos] = path
    return paths


BAD = {2, 5, 6, 11, 17, 19}


def replacement(i, n=20):
    j = (i + 1) % n
    while j in BAD:
        j = (j + 1) % n
    return j


def epoch(loader, e=0):
    loader.set_epoch(e)
    images, labels = [], []
    for x, y in loader:
        images.append(x.clone())
        labels.append(y)
    return torch.cat(images), torch.cat(labels)


def test_skip_replaces_each_bad_sample_with_the_next_readable(data):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = ringloader.Loader(
            Indexed(data), batch_size=4, transform=TRAIN, on_error="skip", seed=3
        )
        images, labels = epoch(loader)
    assert labels.tolist() == [replacement(i) if i in BAD else i for i in range(20)]
    assert loader.stats()["skipped"] == len(BAD)
    notes = [w for w in caught if issubclass(w.category, ringloader.DataWarning)]
    assert len(notes) == 1 and "on_error='skip'" in str(notes[0].message)

    # A replacement draws an augmentation of its own (not a copy of the
    # replacing sample's); with a fixed geometry its pixels are exactly the
    # replacing sample's.
    fixed = T.Compose([T.Resize((40, 52))])
    skip = ringloader.Loader(
        Indexed(data), batch_size=4, transform=fixed, on_error="skip"
    )
    images, labels = epoch(skip)
    good = [i for i in range(20) if i not in BAD]
    ref = ringloader.Loader(Indexed(data), batch_size=20, transform=fixed, sampler=good)
    ref_images, ref_labels = epoch(ref)
    by_index = dict(zip(ref_labels.tolist(), ref_images))
    for pos in range(20):
        want = by_index[labels[pos].item()].float()
        err = (images[pos].float() - want).abs().max().item()
        assert err <= 1.0, (pos, err)  # decoded whole vs cropped: 1 LSB


def test_skip_is_deterministic_across_threads_and_backends(data, monkeypatch):
    digests = set()
    for threads in (1, 2, 4):
        for io in ("io_uring", "pread"):
            loader = ringloader.Loader(
                Indexed(data),
                batch_size=3,
                shuffle=True,
                transform=TRAIN,
                on_error="skip",
                num_threads=threads,
                io=io if ringloader._core.io_probe()[0] else "pread",
            )
            images, labels = epoch(loader, 1)
            h = hashlib.sha256(images.numpy().tobytes() + labels.numpy().tobytes())
            digests.add(h.hexdigest())
    assert len(digests) == 1


def test_skip_replaces_within_the_part_of_a_concat_dataset(tmp_path):
    """A composition's sample is replaced by the next one of its own part
    (wrapping to the part's first), never by another part's: a part is
    what a ConcatDataset lists, down through nested ConcatDatasets, and a
    Subset is one part. Before, by the table's next id: a3 by b0, c0, b0."""

    def files(name, n, label, bad=-1):
        paths = write_jpegs(tmp_path, name, n, seed=label, bad=bad)
        return ringloader.FileList(paths, label + np.arange(n))

    a, b, c = files("a", 4, 0, bad=3), files("b", 3, 100), files("c", 3, 200)
    concat, subset = torch.utils.data.ConcatDataset, torch.utils.data.Subset
    cases = [
        (concat([a, b]), [0, 1, 2, 0, 100, 101, 102]),
        (concat([concat([b, a]), c]), [100, 101, 102, 0, 1, 2, 0, 200, 201, 202]),
        (concat([subset(a, [2, 3]), b]), [2, 2, 100, 101, 102]),
    ]
    fixed = T.Compose([T.Resize((10, 12))])
    for dataset, want in cases:
        loader = ringloader.Loader(
            dataset, batch_size=3, transform=fixed, on_error="skip", num_threads=2
        )
        images, labels = epoch(loader)
        assert labels.tolist() == want
        assert loader.stats()["skipped"] == 1
        # The replacement's pixels are its own: those of its other place.
        same = [i for i, y in enumerate(want) if want.count(y) == 2]
        assert len(same) == 2 and torch.equal(images[same[0]], images[same[1]])
    # A part of one bad sample has nothing to replace it with.
    loader = ringloader.Loader(
        concat([subset(a, [3]), b]), batch_size=2, transform=fixed, on_error="skip"
    )
    with pytest.raises(ringloader.DecodeError, match="no other sample in its dataset"):
        epoch(loader)


def test_parts_given_to_the_core_are_checked(tmp_path):
    """Pipeline(parts=): an int64 array, each part's first id then the
    table's length; anything else is refused when the pipeline is made."""
    spec = T.compile_transform(T.Compose([T.Resize((8, 8))])).spec
    paths = write_jpegs(tmp_path, "p", 4, bad=1)
    p = ringloader._core.Pipeline(
        spec, paths=paths, skip_errors=True, parts=np.array([0, 2, 4])
    )
    p.submit([1], [1], 0)
    assert [r[1] for r in p.next().replaced] == [0]  # 1 wraps to 0, not 2
    p.close()
    for bad in ([0, 2, 4], np.array([0, 2, 4], np.int32), np.array([0, 4], ">i8")):
        with pytest.raises(TypeError, match="int64"):
            ringloader._core.Pipeline(spec, paths=paths, parts=bad)
    for bad in ([0, 3], [1, 4], [0, 2, 2, 4], [0, 3, 2, 4]):
        with pytest.raises(ValueError, match="parts"):
            ringloader._core.Pipeline(spec, paths=paths, parts=np.array(bad))


def test_raise_is_the_default_and_names_the_file(data):
    loader = ringloader.Loader(Indexed(data), batch_size=4, transform=TRAIN)
    it = iter(loader)
    with pytest.raises(ringloader.DecodeError, match="corrupt.jpg"):
        next(it)
    assert loader.stats()["skipped"] == 0


def test_consecutive_failure_limit_raises(tmp_path, data):
    # Indices 5 and 6 are bad in a row: with a limit of 2, sample 5 and its
    # one allowed replacement (6) fail, so the error is raised.
    loader = ringloader.Loader(
        Indexed(data),
        batch_size=4,
        transform=TRAIN,
        on_error="skip",
        max_consecutive_errors=2,
    )
    with pytest.raises(ringloader.DecodeError, match="truncated.jpg") as e:
        epoch(loader)
    assert "on_error='skip'" in str(e.value)
    # With a limit of 3 the same data loads.
    loader = ringloader.Loader(
        Indexed(data),
        batch_size=4,
        transform=TRAIN,
        on_error="skip",
        max_consecutive_errors=3,
    )
    assert len(epoch(loader)[1]) == 20


def test_all_bad_raises_instead_of_looping(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    paths = bad_files(d)
    loader = ringloader.Loader(
        Indexed(paths), batch_size=2, transform=TRAIN, on_error="skip"
    )
    with pytest.raises((ringloader.DecodeError, OSError)):
        epoch(loader)


def test_bad_arguments():
    with pytest.raises(ValueError, match="on_error"):
        ringloader.Loader(Indexed([]), on_error="ignore")
    with pytest.raises(ValueError, match="max_consecutive_errors"):
        ringloader.Loader(Indexed([]), max_consecutive_errors=0)


def test_consecutive_failure_limit_is_what_replacement_keys_hold(tmp_path):
    # A replacement's random key holds its attempt in 8 bits (csrc/rng.h):
    # a larger limit would give attempt 257 the key of attempt 1 (the same
    # crop of the same file, seen before the bound), or overflow from 513.
    bound = ringloader._core.MAX_CONSECUTIVE_ERRORS
    assert bound == 256
    with pytest.raises(ValueError, match=r"max_consecutive_errors must be 1\.\.256"):
        ringloader.Loader(
            Indexed([]), transform=TRAIN, max_consecutive_errors=bound + 1
        )
    # Up to the bound every attempt has a key of its own: the same file
    # replacing sample 0 at attempt 1 and at attempt 255 is cropped apart.
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg" * 3)
    good = tmp_path / "good.jpg"
    good.write_bytes(jpeg_bytes("baseline", 120, 160, seed=4))
    images = []
    for n_bad in (1, bound - 1):
        paths = [str(bad)] * n_bad + [str(good)]
        loader = ringloader.Loader(
            Indexed(paths),
            batch_size=1,
            sampler=[0],
            transform=TRAIN,
            on_error="skip",
            max_consecutive_errors=bound,
        )
        x, y = epoch(loader)
        assert y.tolist() == [n_bad] and loader.stats()["skipped"] == 1
        images.append(x)
    assert not torch.equal(images[0], images[1])


def test_repeats_beyond_what_keys_hold_raise(tmp_path):
    # With on_error="skip" a replacement keeps a key's low 54 bits, so a
    # sample's repeats in an epoch are counted in 14 bits (bits 40..53):
    # its 16,385th draw would share its replacement's key with the first
    # (before the bound: identical crops at positions 0 and 16,384).
    limit = 1 << (
        ringloader._core.KEY_ATTEMPT_SHIFT - ringloader._core.KEY_OCCURRENCE_SHIFT
    )
    assert limit == 16384
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg" * 3)
    good = tmp_path / "good.jpg"
    good.write_bytes(jpeg_bytes("baseline", 40, 48, seed=4))
    loader = ringloader.Loader(
        Indexed([str(bad), str(good)]),
        batch_size=limit + 1,
        sampler=[0] * (limit + 1),
        transform=T.Compose([T.RandomResizedCrop(8)]),
        on_error="skip",
    )
    with pytest.raises(ValueError, match="sample 0 comes more than 16,384 times"):
        epoch(loader)


def test_keys_of_repeats():
    from ringloader._keys import MAX_DRAWS, Keys, index_of

    shift = ringloader._core.KEY_OCCURRENCE_SHIFT
    # Unchanged for every key in use: index, then the repeat count at bit 40.
    assert Keys().draw([7, 3, 7, 7]) == [7, 3, 7 + (1 << shift), 7 + (2 << shift)]
    assert index_of(5 + (9 << shift)) == 5
    for skip in (False, True):
        keys = Keys(skip)
        last = keys.draw([7] * MAX_DRAWS[skip])[-1]
        assert last < 1 << (
            ringloader._core.KEY_ATTEMPT_SHIFT
            if skip
            else ringloader._core.KEY_REPLACEMENT_BIT
        )
        with pytest.raises(ValueError, match="sample 7 comes more than"):
            keys.draw([7])


def test_truncated_allowed_is_counted_and_announced(tmp_path):
    good = jpeg_bytes("baseline", 120, 160, seed=5)
    paths = []
    for i in range(4):
        p = tmp_path / f"{i}.jpg"
        p.write_bytes(good[: len(good) * 2 // 3] if i in (1, 2) else good)
        paths.append(str(p))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = ringloader.Loader(
            Indexed(paths), batch_size=2, transform=TRAIN, allow_truncated=True
        )
        images, labels = epoch(loader)
    assert labels.tolist() == [0, 1, 2, 3]
    assert loader.stats()["truncated"] == 2
    notes = [w for w in caught if issubclass(w.category, ringloader.DataWarning)]
    assert len(notes) == 1 and "truncated" in str(notes[0].message)
    # Without allow_truncated the same files are errors.
    strict = ringloader.Loader(Indexed(paths), batch_size=2, transform=TRAIN)
    with pytest.raises(ringloader.DecodeError, match="1.jpg"):
        epoch(strict)
    assert np.isfinite(images.float().mean().item())


def test_counts_add_up_on_mixed_bad_data(tmp_path):
    """errors counts every sample that could not be loaded, the candidates
    tried as replacements included; skipped counts the samples replaced;
    so skipped <= errors. A file of another format Pillow cannot read is an
    error like any other (not a fallback decode), as are a broken PNG and
    WebP (the native decoders'); a BMP Pillow reads is a fallback decode,
    not an error; a truncated JPEG is an error, or with
    allow_truncated=True a truncated decode instead."""
    from PIL import Image

    good = jpeg_bytes("s420", 90, 120, seed=7)
    other = tmp_path / "real.bmp"
    Image.new("RGB", (50, 40), (10, 200, 30)).save(other, format="BMP")
    bad = {
        1: tmp_path / "missing.jpg",
        3: tmp_path / "corrupt.jpg",
        4: tmp_path / "truncated.jpg",  # 3, 4 and 5: three in a row
        5: tmp_path / "junk.png",
        9: tmp_path / "junk.bmp",
        15: tmp_path / "junk.webp",  # the last: its replacement wraps to 0
    }
    bad[3].write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg" * 3)
    bad[4].write_bytes(good[: len(good) // 2])
    bad[5].write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 2)
    bad[9].write_bytes(b"BM" + b"\x01" * 60)
    bad[15].write_bytes(b"RIFF\x10\0\0\0WEBPVP8 " + b"\x02" * 40)
    paths = []
    for i in range(16):
        p = tmp_path / f"{i:02d}.jpg"
        p.write_bytes(jpeg_bytes("baseline", 60 + i, 80, seed=i))
        paths.append(str(bad.get(i, other if i == 7 else p)))

    def expected_errors(bad_positions):
        # Each bad sample fails once, then once more for every bad sample
        # tried after it (in dataset order, wrapping) before a good one.
        total = 0
        for i in bad_positions:
            total += 1
            j = (i + 1) % 16
            while j in bad_positions:
                total += 1
                j = (j + 1) % 16
        return total

    resize = T.Resize((32, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = ringloader.Loader(
            Indexed(paths), batch_size=4, transform=resize, on_error="skip"
        )
        labels = epoch(loader)[1]
    s = loader.stats()
    counts = {k: s[k] for k in ("errors", "skipped", "fallback_decodes", "truncated")}
    print("allow_truncated=False:", counts)
    assert labels.tolist() == [
        0, 2, 2, 6, 6, 6, 6, 7, 8, 10, 10, 11, 12, 13, 14, 0
    ]  # fmt: skip
    assert counts["skipped"] == len(bad) == 6
    assert counts["errors"] == expected_errors(set(bad)) == 9
    assert counts["skipped"] <= counts["errors"]
    assert counts["fallback_decodes"] == 1 and counts["truncated"] == 0

    # With allow_truncated=True the truncated JPEG loads: counted as
    # truncated, no longer as an error nor skipped.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tolerant = ringloader.Loader(
            Indexed(paths),
            batch_size=4,
            transform=resize,
            on_error="skip",
            allow_truncated=True,
        )
        epoch(tolerant)
    s = tolerant.stats()
    counts = {k: s[k] for k in ("errors", "skipped", "fallback_decodes", "truncated")}
    print("allow_truncated=True: ", counts)
    assert counts["skipped"] == 5
    assert counts["errors"] == expected_errors(set(bad) - {4}) == 5
    assert counts["skipped"] <= counts["errors"]
    assert counts["truncated"] == 2  # as a sample and as 3's replacement
    assert counts["fallback_decodes"] == 1
