"""Detection and segmentation datasets as flat tables
(ringloader.datasets.detection): torchvision's CocoDetection, VOCDetection
and VOCSegmentation, plain, wrapped by wrap_dataset_for_transforms_v2 (its
target_keys), or subclassed, are recognised; for every image the tables
give exactly the target torchvision's __getitem__ gives (boxes, labels,
masks rasterized by the C core, image_id and the json's own fields, their
dtypes and canvas sizes), on generated COCO and VOC folders; a bad
annotation is its image's problem, kept with a message naming the file,
image and annotation (a dataset-wide fault a ValueError), and what
torchvision passes through is passed through; the tables keep no Python
object per annotation."""

from __future__ import annotations

import json
import os
import tracemalloc

import numpy as np
import pytest
import torch
from detection_data import coco_json, write_coco, write_voc
from PIL import Image
from torchvision import datasets, tv_tensors
from torchvision.datasets import wrap_dataset_for_transforms_v2 as wrap

import ringloader
from ringloader.datasets.detection import detection_tables, target

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return write_coco(tmp_path_factory.mktemp("coco"), 40, seed=3)


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    return write_voc(tmp_path_factory.mktemp("voc"), 12, seed=4)


def same(ours, theirs, where=""):
    """Equal values of equal types: tensors (and tv_tensors' metadata),
    dicts, lists and numbers."""
    assert type(ours) is type(theirs), (where, type(ours), type(theirs))
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, where
        # NaN where torchvision has NaN (a box of NaN it passes through)
        nan = theirs.is_floating_point() and bool(theirs.isnan().any())
        assert torch.equal(ours, theirs) or (
            nan and torch.allclose(ours, theirs, rtol=0, atol=0, equal_nan=True)
        ), where
        if isinstance(theirs, tv_tensors.BoundingBoxes):
            assert (ours.format, ours.canvas_size) == (
                theirs.format,
                theirs.canvas_size,
            ), where
    elif isinstance(theirs, dict):
        assert set(ours) == set(theirs), (where, set(ours), set(theirs))
        for k in theirs:
            same(ours[k], theirs[k], f"{where}.{k}")
    elif isinstance(theirs, list):
        assert len(ours) == len(theirs), where
        for k, (a, b) in enumerate(zip(ours, theirs)):
            same(a, b, f"{where}[{k}]")
    elif isinstance(theirs, float) and theirs != theirs:
        assert isinstance(ours, float) and ours != ours, where  # NaN
    else:
        assert ours == theirs, where


@pytest.mark.parametrize(
    "keys", [None, "all", ["masks", "labels"], ["boxes", "area", "iscrowd", "bbox"]]
)
def test_wrapped_coco_targets_are_the_tables(coco, keys):
    root, ann = coco
    ds = wrap(datasets.CocoDetection(root, ann), target_keys=keys)
    t = detection_tables(ds, ann_file=ann)
    assert t is not None and t.kind == "coco" and len(t) == len(ds) == 40
    empty = crowd = 0
    for i in range(len(ds)):
        image, theirs = ds[i]
        same(target(t, i), theirs, f"image {i}")
        # the canvas torchvision takes from the decoded image is the json's
        assert tuple(t.sizes[i]) == (image.height, image.width)
        empty += theirs.keys() == {"image_id"}
        crowd += int(t.iscrowd[t.annotations(i)].sum())
    assert empty == 8 and crowd > 5


def test_coco_paths_ids_and_plain_targets(coco):
    root, ann = coco
    ds = datasets.CocoDetection(root, ann)
    t = detection_tables(ds, ann_file=ann)
    assert not t.wrapped and t.target_keys is None
    assert list(t.paths) == [
        os.path.join(root, ds.coco.imgs[i]["file_name"]) for i in ds.ids
    ]
    assert t.image_ids.tolist() == ds.ids
    kinds = set()
    for i in range(len(ds)):
        same(target(t, i), ds[i][1], f"image {i}")
        kinds |= set(t.seg_kind[t.annotations(i)].tolist())
    assert kinds == {0, 1, 2}  # polygons, RLE counts lists, RLE strings
    assert (
        t.boxes.dtype == np.float64
        and t.coords.dtype == np.float64
        and t.runs.dtype == np.uint32
    )


def test_images_without_sizes_and_filelist_paths(tmp_path):
    """An images entry without height and width: sizes -1, an RLE taken at
    its own size; the paths are a blob FileList takes as they are."""
    data = coco_json(5, seed=6)
    root, ann = write_coco(tmp_path, 5, data=data)
    for entry in data["images"]:
        del entry["height"], entry["width"]
    (tmp_path / "nosize.json").write_text(json.dumps(data))
    ds = datasets.CocoDetection(root, str(tmp_path / "nosize.json"))
    t = detection_tables(ds)
    assert (t.sizes == -1).all()
    rle = t.seg_kind != 0
    assert rle.any() and (t.rle_size[rle] > 0).all()
    for i in range(len(ds)):
        same(target(t, i), ds[i][1], f"image {i}")
    files = ringloader.FileList(t.paths, np.zeros(len(t), np.int64))
    assert files.paths is t.paths
    assert list(files.paths) == [
        os.path.join(root, ds.coco.imgs[i]["file_name"]) for i in ds.ids
    ]


def test_subclasses_and_other_datasets(coco, tmp_path):
    root, ann = coco

    class Sub(datasets.CocoDetection):
        pass

    class OwnItems(datasets.CocoDetection):
        def __getitem__(self, index):
            return super().__getitem__(index)

    class OwnTarget(datasets.CocoDetection):
        def _load_target(self, id):
            return []

    sub = Sub(root, ann)
    sub.ids = sub.ids[::3]
    t = detection_tables(wrap(sub, target_keys="all"))
    assert len(t) == len(sub) == 14
    for i in range(len(sub)):
        same(target(t, i), wrap(sub, target_keys="all")[i][1], f"image {i}")
    assert detection_tables(OwnItems(root, ann)) is None
    assert detection_tables(OwnTarget(root, ann)) is None
    assert detection_tables(datasets.CocoCaptions(root, ann)) is None
    assert detection_tables(list(range(3))) is None


def test_voc_segmentation(voc):
    for ds in (
        datasets.VOCSegmentation(voc, "2012", "train"),
        wrap(datasets.VOCSegmentation(voc, "2012", "train")),
    ):
        t = detection_tables(ds)
        assert t.kind == "voc_segmentation" and len(t) == 12
        assert list(t.paths) == ds.images and list(t.mask_paths) == ds.masks
        for i in range(len(ds)):
            ours, theirs = target(t, i), ds[i][1]
            if isinstance(theirs, Image.Image):
                assert ours.mode == theirs.mode == "P"
                assert np.array_equal(np.asarray(ours), np.asarray(theirs))
            else:
                same(ours, theirs, f"image {i}")


@pytest.mark.parametrize("keys", [None, ["boxes"], ["labels"]])
def test_voc_detection(voc, keys):
    ds = wrap(datasets.VOCDetection(voc, "2012", "train"), target_keys=keys)
    t = detection_tables(ds)
    assert t.kind == "voc_detection" and list(t.paths) == ds.images
    for i in range(len(ds)):
        same(target(t, i), ds[i][1], f"image {i}")
        raw = datasets.VOCDetection(voc, "2012", "train")[i][1]["annotation"]["object"]
        rows = t.annotations(i)
        assert [o["name"] for o in raw] == list(t.names[rows])
        assert [int(o["difficult"]) for o in raw] == t.iscrowd[rows].tolist()
    with pytest.raises(ValueError, match="'annotation' key"):
        target(
            detection_tables(
                wrap(datasets.VOCDetection(voc, "2012", "train"), target_keys="all")
            ),
            0,
        )


# --- bad input: the image's problem, naming the file, image and annotation ---


def _mutated(tmp_path, change):
    data = coco_json(6, seed=5)
    change(data)
    return write_coco(tmp_path, 6, data=data)


def _first(data):
    return data["annotations"][0]


def _alone(d):
    """The first annotation the only one of its image, its bbox 3 numbers."""
    first = _first(d)
    first["bbox"] = [1, 2, 3]
    d["annotations"] = [first] + [
        a for a in d["annotations"][1:] if a["image_id"] != first["image_id"]
    ]


def _rle_of(d, counts):
    """An RLE of the first annotation's image's size."""
    image = next(e for e in d["images"] if e["id"] == _first(d)["image_id"])
    return {"size": [image["height"], image["width"]], "counts": counts}


def _text_ids(d):
    for entry in d["images"]:
        entry["id"] = f"im{entry['id']}"
    for a in d["annotations"]:
        a["image_id"] = f"im{a['image_id']}"


# case: (change, our message, what torchvision 0.29's wrapped dataset does
# with it when its images are read: the exception, or "passes"; None: not
# tried, pycocotools' raster of a NaN coordinate grew a process past 23 GB)
BAD = {
    "segmentation_int": (
        lambda d: _first(d).update(segmentation=3),
        "neither a list of polygons",
        "ValueError",
    ),
    "segmentation_empty": (
        lambda d: _first(d).update(segmentation=[]),
        "empty list",
        "IndexError",
    ),
    "polygon_of_4": (
        lambda d: _first(d).update(segmentation=[[1, 1, 5, 5]]),
        "polygon 0 has 4 numbers",
        "TypeError",
    ),
    "polygon_odd": (
        lambda d: _first(d).update(segmentation=[[1, 1, 5, 1, 3]]),
        "polygon 0 has 5",
        "passes",
    ),
    "rle_size": (
        lambda d: _first(d).update(segmentation={"size": [3, 3], "counts": "9"}),
        "RLE size",
        "RuntimeError",
    ),
    "rle_counts": (
        lambda d: _first(d).update(segmentation={"size": None, "counts": 7}),
        "RLE size",
        "ValueError",
    ),
    "polygon_nan": (
        lambda d: _first(d).update(
            segmentation=[[1, 1, 5, 1, 3, 4], [1, 1, 5, 1, 3, float("nan")]]
        ),
        "polygon 1 has a coordinate that is not finite",
        None,
    ),
    "polygon_huge": (
        lambda d: _first(d).update(segmentation=[[1, 1, 5, 1, 3, 10**400]]),
        "polygon 0 has a coordinate that is not finite",
        "OverflowError",
    ),
    "polygon_text": (
        lambda d: _first(d).update(segmentation=[[1, 1, 5, 1, 3, "4"]]),
        "polygon 0 is not a list of numbers",
        "passes",
    ),
    "rle_negative": (
        lambda d: _first(d).update(segmentation=_rle_of(d, [-1, 2])),
        "RLE counts are neither",
        "OverflowError",
    ),
    "rle_float": (
        lambda d: _first(d).update(segmentation=_rle_of(d, [1.0, 2])),
        "RLE counts are neither",
        "passes",
    ),
    "rle_sum": (
        lambda d: _first(d).update(segmentation=_rle_of(d, [1, 2])),
        "RLE counts sum to 3",
        "passes",
    ),
    "bbox_huge": (
        lambda d: _first(d).update(bbox=[1, 2, 3, 10**400]),
        "is not 4 numbers",
        "OverflowError",
    ),
    "area_text": (
        lambda d: _first(d).update(area="12"),
        "area '12' is not a finite number",
        "passes",
    ),
    "bbox_none": (
        lambda d: _first(d).update(bbox=None),
        "is not 4 numbers",
        "RuntimeError",
    ),
    "bbox_3": (
        lambda d: _first(d).update(bbox=[1, 2, 3]),
        "is not 4 numbers",
        "ValueError",
    ),
    "bbox_3_alone": (_alone, "is not 4 numbers", "RuntimeError"),
    "bbox_text": (
        lambda d: _first(d).update(bbox=[1, 2, 3, "4"]),
        "is not 4 numbers",
        "TypeError",
    ),
    "category_text": (
        lambda d: _first(d).update(category_id="3"),
        "category_id '3' is not an integer",
        "ValueError",
    ),
    "id_twice": (
        lambda d: d["annotations"][1].update(id=_first(d)["id"]),
        "given twice",
        "passes",
    ),
}

# What breaks the dataset as a whole: a ValueError when the tables are
# built, naming the first of the dataset's ids (sorted, as CocoDetection
# sorts them).
BROKEN = {
    "no_file_name": (
        lambda d: d["images"][0].pop("file_name"),
        "has no images entry with a 'file_name'",
        "KeyError",
    ),
    # pycocotools takes a str id for a list of ids, one a character
    "text_image_ids": (_text_ids, "is not an integer", "KeyError"),
}

# What torchvision passes through, and so do the tables: a category_id
# absent from the categories (the label is the id), a box of NaN and
# infinities (SanitizeBoundingBoxes drops it), an annotation of an image
# with no entry (nobody reads it), a segmentation the target does not use.
PASSED = {
    "category": (lambda d: _first(d).update(category_id=999), "all"),
    "bbox_nan": (
        lambda d: _first(d).update(bbox=[1.0, float("nan"), float("inf"), 2.0]),
        ["boxes", "labels", "bbox", "image_id"],
    ),
    "no_image": (lambda d: _first(d).update(image_id=123456), "all"),
    "segmentation_unused": (
        lambda d: _first(d).update(segmentation=[[1, 1, 5, 5]]),
        ["boxes", "labels", "area", "iscrowd", "image_id"],
    ),
}


def _torchvision_reads(ds) -> str:
    for i in range(len(ds)):
        try:
            ds[i]
        except Exception as e:
            return type(e).__name__
    return "passes"


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_annotation_is_its_images_problem(tmp_path, case):
    """Kept as the image's problem, with a message naming the annotation
    file, the image (id and file) and the annotation, whether torchvision
    raises (only when the image is read) or would silently give one
    annotation for another; the other images are read as torchvision
    reads them."""
    change, message, theirs = BAD[case]
    root, ann = _mutated(tmp_path, change)
    ds = wrap(datasets.CocoDetection(root, ann), target_keys="all")
    if theirs is not None:
        assert _torchvision_reads(ds) == theirs
    with open(ann) as f:
        data = json.load(f)
    bad = data["annotations"][0]
    tables = detection_tables(ds, ann_file=ann)
    rows = {ds.ids.index(bad["image_id"])}
    if case == "id_twice":
        rows.add(ds.ids.index(data["annotations"][1]["image_id"]))
    assert set(tables.problems) == rows
    row = ds.ids.index(bad["image_id"])
    name = ds.coco.imgs[bad["image_id"]]["file_name"]
    text = tables.problems[row]
    assert text.startswith(
        f"{ann}: image id {bad['image_id']} ({name}), annotation id {bad['id']}: "
    ), text
    assert message in text
    for i in range(len(ds)):
        if i not in rows:
            same(target(tables, i), ds[i][1], f"image {i}")
    # without the file's name: the dataset's root
    unnamed = detection_tables(ds).problems[row]
    assert unnamed.startswith("the annotation file of CocoDetection at " + str(root))


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_dataset_is_refused_naming_the_file(tmp_path, case):
    change, message, theirs = BROKEN[case]
    root, ann = _mutated(tmp_path, change)
    ds = wrap(datasets.CocoDetection(root, ann), target_keys="all")
    assert _torchvision_reads(ds) == theirs
    with open(ann) as f:
        data = json.load(f)
    with pytest.raises(ValueError, match=message) as e:
        detection_tables(ds, ann_file=ann)
    text = str(e.value)
    assert text.startswith(ann + ": image id ")
    assert f"image id {min(e['id'] for e in data['images'])!r}" in text


@pytest.mark.parametrize("case", sorted(PASSED))
def test_what_torchvision_passes_through_is_passed_through(tmp_path, case):
    change, keys = PASSED[case]
    root, ann = _mutated(tmp_path, change)
    ds = wrap(datasets.CocoDetection(root, ann), target_keys=keys)
    tables = detection_tables(ds, ann_file=ann)
    assert tables.problems == {}
    for i in range(len(ds)):
        same(target(tables, i), ds[i][1], f"image {i}")


def test_bad_voc_input_is_named(tmp_path):
    def objects(k, h, w, rng):
        return [
            [("cat", (1, 2, 3, 4), 0)],
            [("zebra", (1, 2, 3, 4), 0)],
            [("dog", ("1.5", 2, 3, 4), 1)],
        ][k]

    root = write_voc(tmp_path, 3, objects=objects)
    voc = os.path.join(root, "VOCdevkit", "VOC2012")
    ds = datasets.VOCDetection(root, "2012", "train")
    # torchvision's wrapper raises when it reads those images
    with pytest.raises(ValueError, match="invalid literal for int"):
        wrap(ds)[2]
    with pytest.raises(KeyError, match="zebra"):
        wrap(ds)[1]
    with pytest.raises(
        ValueError,
        match=r"2012_000002.xml: image 2, object 0 \(dog\): bndbox coordinates",
    ):
        detection_tables(ds)
    os.remove(os.path.join(voc, "Annotations", "2012_000002.xml"))
    with open(os.path.join(voc, "ImageSets", "Main", "train.txt"), "w") as f:
        f.write("2012_000000\n2012_000001\n")
    # an unknown name: kept (label -1) unless the wrapped labels need it
    t = detection_tables(datasets.VOCDetection(root, "2012", "train"))
    assert t.category_id.tolist() == [8, -1] and list(t.names) == ["cat", "zebra"]
    assert (
        detection_tables(
            wrap(datasets.VOCDetection(root, "2012", "train"), target_keys=["boxes"])
        )
        is not None
    )
    with pytest.raises(
        ValueError, match=r"2012_000001.xml: image 1, object 0: name 'zebra'"
    ):
        detection_tables(wrap(datasets.VOCDetection(root, "2012", "train")))
    os.remove(os.path.join(voc, "SegmentationClass", "2012_000001.png"))
    with pytest.raises(
        ValueError,
        match=r"image 1 \(2012_000001.jpg\): its mask .*2012_000001.png is not a file",
    ):
        detection_tables(datasets.VOCSegmentation(root, "2012", "train"))


def test_voc_image_without_objects(tmp_path):
    """An empty range, where torchvision's wrapper raises KeyError."""

    def objects(k, h, w, rng):
        return [[("cat", (1, 2, 3, 4), 0)], [], [("bus", (2, 3, 5, 7), 1)]][k]

    root = write_voc(tmp_path, 3, objects=objects)
    ds = wrap(datasets.VOCDetection(root, "2012", "train"))
    with pytest.raises(KeyError):
        ds[1]
    t = detection_tables(ds)
    assert t.first.tolist() == [0, 1, 1, 2]
    assert target(t, 1)["boxes"].shape == (0, 4)
    for i in (0, 2):
        same(target(t, i), ds[i][1], f"image {i}")


# --- memory: the arrays, and nothing per annotation beyond them ---


def _kept(tmp_path, n_images):
    data = coco_json(n_images, seed=7, sizes=[(30, 40)] * n_images)
    ann = tmp_path / f"big{n_images}.json"
    ann.write_text(json.dumps(data))
    ds = datasets.CocoDetection(str(tmp_path), str(ann))
    # once untraced: imports, and Python's free lists filled (a constant)
    detection_tables(ds)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        t = detection_tables(ds)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return kept, t.nbytes(), int(t.first[-1])


def test_tables_keep_no_python_object_per_annotation(tmp_path):
    """10x the annotations: the bytes kept grow by the arrays' bytes (boxes,
    ids, polygons' coordinates, RLE runs) and under 2 more a annotation;
    a dict per annotation would be hundreds."""
    small, big = _kept(tmp_path, 300), _kept(tmp_path, 3000)
    anns = big[2] - small[2]
    kept, arrays = (big[0] - small[0]) / anns, (big[1] - small[1]) / anns
    assert anns > 7000
    assert kept - arrays < 2, (small, big, kept, arrays)
    assert arrays < 1000, arrays
