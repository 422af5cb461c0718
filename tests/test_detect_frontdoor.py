"""torchvision's detection reference through ringloader.DataLoader with the
DataLoader line alone changed: a CocoDetection wrapped by
``wrap_dataset_for_transforms_v2`` with the reference's eval preset, or its
hflip train preset, images without annotations removed by a Subset,
batches from a BatchSampler or the reference's GroupedBatchSampler-like
batch sampler, ``collate_fn=tuple(zip(*batch))``. The pixels come from the
C pipeline (no FallbackWarning); each item equals torch's DataLoader's:
images within 1 LSB (JPEG decoders), boxes within 1e-3 px, labels,
image_id and masks identical. Presets with geometry the targets do not
follow yet fall back, saying why (the resizes and crops the plan fuses:
test_detect_geometry)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, SequentialSampler, Subset
from torchvision import datasets, tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader
from ringloader import _core

from detection_data import coco_json, write_coco
from test_dropin import fused

SEED = 5
JPEG_TOL = 1 / 255 + 1e-6  # libjpeg's build against Pillow's, as test_varying_size


class Preset:
    """As the reference's presets are written: a class holding a v2
    Compose, called on (image, target)."""

    def __init__(self, transforms):
        self.transforms = v2.Compose(transforms)

    def __call__(self, img, target):
        return self.transforms(img, target)


def eval_preset(kind="compose"):
    if kind == "reference":  # DetectionPresetEval(use_v2=True)
        return Preset(
            [v2.ToImage(), v2.ConvertImageDtype(torch.float), v2.ToPureTensor()]
        )
    return v2.Compose(
        [v2.ToImage(), v2.ToDtype(torch.float, scale=True), v2.ToPureTensor()]
    )


def hflip_preset(backend="tv_tensor"):
    """DetectionPresetTrain(data_augmentation="hflip", use_v2=True): the
    flip on the PIL image ("pil", its default) or after ToImage."""
    if backend == "pil":
        head = [v2.RandomHorizontalFlip(p=0.5), v2.PILToTensor()]
    else:
        head = [v2.ToImage(), v2.RandomHorizontalFlip(p=0.5)]
    return Preset(
        head
        + [
            v2.ToDtype(torch.float, scale=True),
            v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
            v2.SanitizeBoundingBoxes(),
            v2.ToPureTensor(),
        ]
    )


def collate_fn(batch):
    return tuple(zip(*batch))


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return write_coco(tmp_path_factory.mktemp("coco"), 24, seed=SEED)


def dataset(coco, transforms, keys=("boxes", "labels", "image_id")):
    root, ann = coco
    ds = datasets.CocoDetection(root, ann, transforms=transforms)
    ds = datasets.wrap_dataset_for_transforms_v2(ds, target_keys=list(keys))
    # As the reference's train set: images without annotations removed.
    ids = [i for i, img_id in enumerate(ds.ids) if ds.coco.getAnnIds(imgIds=img_id)]
    return Subset(ds, ids)


class AspectGroups(torch.utils.data.Sampler):
    """A user's batch sampler of index lists, grouping as the reference's
    GroupedBatchSampler does (by aspect ratio), fixed for the test."""

    def __init__(self, ds, batch_size):
        inner = ds.dataset
        tall = []
        wide = []
        for k, i in enumerate(ds.indices):
            info = inner.coco.imgs[inner.ids[i]]
            (tall if info["height"] > info["width"] else wide).append(k)
        self.batches = [
            g[s : s + batch_size]
            for g in (wide, tall)
            for s in range(0, len(g), batch_size)
        ]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def same_target(ours, ref, tol=1e-3):
    assert type(ours) is type(ref) and ours.keys() == ref.keys()
    for key, want in ref.items():
        got = ours[key]
        assert type(got) is type(want), key
        if key == "boxes":
            assert got.dtype == want.dtype and got.shape == want.shape
            if len(want):
                assert (got.double() - want.double()).abs().max().item() <= tol
            if isinstance(want, tv_tensors.BoundingBoxes):
                assert got.canvas_size == want.canvas_size
                assert got.format == want.format
        elif isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want), key
        else:
            assert got == want, key


def same_image(ours, ref):
    assert type(ours) is type(ref)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert (ours - ref).abs().max().item() <= JPEG_TOL


@pytest.mark.parametrize(
    "keys", [("boxes", "labels", "image_id"), ("boxes", "labels", "masks", "image_id")]
)
@pytest.mark.parametrize("batching", ["batch_sampler", "grouped"])
@pytest.mark.parametrize("kind", ["compose", "reference"])
def test_eval_preset_batches_equal_torchs(coco, keys, batching, kind):
    ds = dataset(coco, eval_preset(kind), keys)
    if batching == "grouped":
        sampler = AspectGroups(ds, 3)
    else:
        sampler = BatchSampler(SequentialSampler(ds), 4, drop_last=True)
    kw = dict(batch_sampler=sampler, num_workers=2, collate_fn=collate_fn)
    ours = list(fused(ds, **kw))
    theirs = list(torch.utils.data.DataLoader(ds, **kw))
    assert len(ours) == len(theirs) > 2
    for (images, targets), (ref_images, ref_targets) in zip(ours, theirs):
        assert type(images) is tuple and len(images) == len(ref_images)
        for x, y in zip(images, ref_images):
            same_image(x, y)
        for t, r in zip(targets, ref_targets):
            same_target(t, r)


def test_a_to_dtype_before_to_image_leaves_the_pil_image(coco):
    """v2's ToDtype passes a PIL image by: ToImage after it makes an 8-bit
    image under torch. Before, the image came out float in [0, 1]."""
    tf = Preset(
        [v2.ToDtype(torch.float, scale=True), v2.ToImage(), v2.SanitizeBoundingBoxes()]
    )
    ds = dataset(coco, tf)
    kw = dict(batch_size=4, collate_fn=collate_fn)
    ours = list(fused(ds, **kw))
    theirs = list(torch.utils.data.DataLoader(ds, **kw))
    assert len(ours) == len(theirs) > 2
    for (images, targets), (ref_images, ref_targets) in zip(ours, theirs):
        for x, y in zip(images, ref_images):
            assert x.dtype == torch.uint8
            same_image(x.float() / 255, y.float() / 255)
            assert type(x) is type(y) is tv_tensors.Image
        for t, r in zip(targets, ref_targets):
            same_target(t, r)


@pytest.mark.parametrize("then", [v2.ToImage, v2.PILToTensor])
def test_convert_image_dtype_before_the_tensor_falls_back(coco, then):
    """v2's ConvertImageDtype converts the targets but passes a PIL image
    by: before, the image came out float where torch's is 8-bit."""
    tf = Preset([v2.ConvertImageDtype(torch.float), then(), v2.SanitizeBoundingBoxes()])
    with pytest.warns(ringloader.FallbackWarning, match="ConvertImageDtype before"):
        loader = ringloader.DataLoader(
            dataset(coco, tf), batch_size=2, collate_fn=collate_fn
        )
    assert not isinstance(loader, ringloader.Loader)


def test_an_image_without_annotations_gives_its_id_alone(coco):
    root, ann = coco
    ds = datasets.wrap_dataset_for_transforms_v2(
        datasets.CocoDetection(root, ann, transforms=eval_preset())
    )
    kw = dict(batch_size=5, collate_fn=collate_fn)
    ours = [t for _, ts in fused(ds, **kw) for t in ts]
    theirs = [t for _, ts in torch.utils.data.DataLoader(ds, **kw) for t in ts]
    assert any(t.keys() == {"image_id"} for t in theirs)
    for t, r in zip(ours, theirs):
        same_target(t, r)


def wrapped_coco(root, data, transforms, keys, edit):
    """The images written as ``data`` says, the json as ``edit`` changes it."""
    import json

    root, ann = write_coco(root, len(data["images"]), seed=SEED, data=data)
    edit(data)
    with open(ann, "w") as f:
        json.dump(data, f)
    ds = datasets.CocoDetection(root, ann, transforms=transforms)
    return datasets.wrap_dataset_for_transforms_v2(ds, target_keys=list(keys))


def _no_sizes(data):
    for image in data["images"][::2]:
        del image["height"], image["width"]


def test_an_images_entry_without_a_size_takes_the_decoded_one(tmp_path):
    data = coco_json(8, SEED)
    keys = ("boxes", "labels", "masks", "image_id")
    flip = Preset(
        [
            v2.ToImage(),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float, scale=True),
            v2.ToPureTensor(),
        ]
    )
    ds = wrapped_coco(tmp_path, data, flip, keys, _no_sizes)
    kw = dict(batch_size=3, collate_fn=collate_fn)
    ours = [t for _, ts in fused(ds, seed=3, **kw) for t in ts]
    ref = datasets.wrap_dataset_for_transforms_v2(
        datasets.CocoDetection(
            ds.root,
            ds.root + "/instances.json",
            transforms=v2.Compose([v2.ToImage(), v2.ToDtype(torch.float, scale=True)]),
        ),
        target_keys=list(keys),
    )
    loader = fused(ds, seed=3, **kw)
    spec = loader._plans[0].compiled.spec
    for i, t in enumerate(ours):
        image, want = ref[i]
        h, w = image.shape[-2:]
        if len(want) > 1 and _core.plan_window(spec, w, h, 3, 0, i)["flip"]:
            want = {k: _flipped(k, v) for k, v in want.items()}
        same_target(t, v2.ToPureTensor()(image, want)[1])


def _flipped(key, value):
    return F.horizontal_flip(value) if key in ("boxes", "masks") else value


def test_an_images_entry_of_another_size_is_refused_naming_the_file(tmp_path):
    data = coco_json(4, SEED)
    image = data["images"][1]

    def taller(data):
        image["height"] += 1
        # An RLE of the old size would be refused as the tables are built.
        data["annotations"] = [
            a
            for a in data["annotations"]
            if a["image_id"] != image["id"] or isinstance(a["segmentation"], list)
        ]

    ds = wrapped_coco(tmp_path, data, eval_preset(), ("boxes", "labels"), taller)
    name = image["file_name"]
    with pytest.raises(
        ValueError, match=f"{name}: the image is .* but the annotation file"
    ):
        list(fused(ds, batch_size=2, collate_fn=collate_fn))


def flipped(loader, ds, position, epoch=0):
    """Whether the plan flipped the sample at ``position`` of ``ds``."""
    inner = ds.dataset
    info = inner.coco.imgs[inner.ids[ds.indices[position]]]
    spec = loader._plans[0].compiled.spec
    plan = _core.plan_window(
        spec, info["width"], info["height"], loader.seed, epoch, position
    )
    return bool(plan["flip"])


@pytest.mark.parametrize("backend", ["pil", "tv_tensor"])
def test_hflip_preset_flips_image_boxes_and_masks_together(coco, backend):
    keys = ("boxes", "labels", "masks", "image_id")
    ds = dataset(coco, hflip_preset(backend), keys)
    ref = dataset(
        coco, v2.Compose([v2.ToImage(), v2.ToDtype(torch.float, scale=True)]), keys
    )
    loader = fused(ds, batch_size=4, collate_fn=collate_fn, seed=11)
    seen = set()
    position = 0
    for images, targets in loader:
        for image, target in zip(images, targets):
            want_image, want = ref[position]
            flip = flipped(loader, ds, position)
            seen.add(flip)
            if flip:
                want_image = F.horizontal_flip(want_image)
                want = {
                    k: F.horizontal_flip(v) if k in ("boxes", "masks") else v
                    for k, v in want.items()
                }
            want_image, want = v2.SanitizeBoundingBoxes()(want_image, want)
            want_image, want = v2.ToPureTensor()(want_image, want)
            same_image(image, want_image)
            same_target(target, want)
            position += 1
    assert position == len(ds) and seen == {True, False}


@pytest.mark.parametrize(
    "extra, why",
    [
        (v2.ElasticTransform(), "ElasticTransform"),
        # (without expand it reads natively: test_detect_affine)
        (v2.RandomRotation(10, expand=True), "RandomRotation"),
    ],
)
def test_other_presets_fall_back_saying_why(coco, extra, why):
    tf = v2.Compose([v2.ToImage(), extra, v2.ToDtype(torch.float, scale=True)])
    with pytest.warns(ringloader.FallbackWarning, match=why):
        loader = ringloader.DataLoader(
            dataset(coco, tf), batch_size=2, collate_fn=collate_fn
        )
    assert not isinstance(loader, ringloader.Loader)


def test_a_replaced_sample_comes_with_its_own_target(tmp_path):
    """on_error="skip": the sample replacing one that does not decode
    brings its own target."""
    root, ann = write_coco(tmp_path, 8, seed=SEED)
    ref = datasets.wrap_dataset_for_transforms_v2(
        datasets.CocoDetection(root, ann, transforms=eval_preset())
    )
    with open(f"{root}/{ref.coco.imgs[ref.ids[3]]['file_name']}", "wb") as f:
        f.write(b"not an image")
    by_id = {ref.ids[i]: i for i in range(len(ref)) if i != 3}
    loader = fused(ref, batch_size=4, collate_fn=collate_fn, on_error="skip")
    with pytest.warns(ringloader.DataWarning, match="skipped"):
        items = [item for images, targets in loader for item in zip(images, targets)]
    assert len(items) == len(ref)
    for image, target in items:
        want_image, want = ref[by_id[target["image_id"]]]
        same_image(image, want_image)
        same_target(target, want)


class OwnCoco(datasets.CocoDetection):
    """As the detection reference's v1 CocoDetection: its own __getitem__."""

    def __getitem__(self, idx):
        image, target = super().__getitem__(idx)
        return image, {"image_id": self.ids[idx], "annotations": target}


class OwnCocoWithFiles(OwnCoco):
    """A user's subclass that says where its files are: read as the user's
    dataset (its targets: the number of annotations)."""

    def ringloader_files(self):
        paths = [
            f"{self.root}/{self.coco.loadImgs(i)[0]['file_name']}" for i in self.ids
        ]
        return paths, [len(self.coco.getAnnIds(imgIds=i)) for i in self.ids]

    def __getitem__(self, idx):
        image, target = super().__getitem__(idx)
        return self.transform(image), len(target["annotations"])


def test_a_coco_subclass_with_ringloader_files_is_read_as_the_users(coco):
    root, ann = coco
    tf = v2.Compose([v2.Resize((16, 16)), v2.ToImage()])
    ds = OwnCocoWithFiles(root, ann, transform=tf)
    ours = [y for _, ys in fused(ds, batch_size=4) for y in ys.tolist()]
    theirs = [
        y
        for _, ys in torch.utils.data.DataLoader(ds, batch_size=4)
        for y in ys.tolist()
    ]
    assert ours == theirs and len(ours) == len(ds)


def test_other_detection_datasets_fall_back_saying_why(coco, tmp_path):
    from detection_data import write_voc

    root, ann = coco
    voc = write_voc(tmp_path, 4)
    wrap = datasets.wrap_dataset_for_transforms_v2
    cases = [
        (datasets.CocoDetection(root, ann, transforms=eval_preset()), "not wrapped"),
        (
            wrap(datasets.VOCDetection(voc, "2012", "train", transforms=eval_preset())),
            "VOCDetection is not read natively",
        ),
        # the detection reference's own class (its v1 path, without --use-v2)
        (Subset(OwnCoco(root, ann, transforms=eval_preset()), [0, 1]), "--use-v2"),
        (wrap(OwnCoco(root, ann, transforms=eval_preset())), "--use-v2"),
        (datasets.CocoCaptions(root, ann), "not an ImageFolder-like dataset"),
    ]
    for ds, why in cases:
        for _ in range(2):  # the second asks the tables kept on the dataset
            with pytest.warns(ringloader.FallbackWarning, match=why):
                loader = ringloader.DataLoader(ds, batch_size=2, collate_fn=collate_fn)
            assert not isinstance(loader, ringloader.Loader)
