"""The detection and segmentation front doors with ``device=``, on the fake
CUDA runtime (tests/cuda/fake_cudart.c): each image of varying size is its
own region of its batch's device buffer, copied from the pinned arena on
the loader's copy stream, and each target's tensors are placed on the
device; an image past its batch's arena is copied from its own host buffer
into the batch's spill buffer, after the arena. The fake checks every copy
(a pinned slot left untouched until its copy ran, a pageable image neither
freed nor reused before its copy read it, one copy a byte of device
memory, pinned source unless pageable ones are allowed, non-blocking
stream), poisons device memory a consumer reads too early, and counts what
is left allocated after close, after an epoch and after an error
mid-epoch. Each scenario runs in a fresh process: the runtime is loaded
once per process."""

import json
import os
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "cuda"))
import fake_gpu  # noqa: E402  (tests/cuda: the fake runtime and its GPU double)

from detection_data import coco_json, write_coco, write_voc  # noqa: E402

pytest.importorskip("torchvision")


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return fake_gpu.build(str(tmp_path_factory.mktemp("cuda") / "fake_cudart.so"))


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return write_coco(tmp_path_factory.mktemp("coco"), 18, seed=4)


PRELUDE = """
import ctypes, gc, json, os, sys, torch, ringloader
from torchvision import datasets, tv_tensors
from torchvision.transforms import v2
sys.path.insert(0, "cuda")
import fake_gpu
fake_gpu.install()
fake = ctypes.CDLL(os.environ["RINGLOADER_CUDART"])
fake.fake_cuda_is_device.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
def report(**kw):
    gc.collect()  # the batches' device buffers, held by tensors until then
    fake_gpu.report(**kw)
def collate_fn(batch):
    return tuple(zip(*batch))
def on_device(t):
    return bool(fake.fake_cuda_is_device(t.data_ptr(), t.numel() * t.element_size()))
def coco(transforms, keys=("boxes", "labels", "masks", "image_id")):
    ds = datasets.CocoDetection(sys.argv[1], sys.argv[2], transforms=transforms)
    return datasets.wrap_dataset_for_transforms_v2(ds, target_keys=list(keys))
def same_target(got, want, gpu):
    ok = got.keys() == want.keys()
    for key, w in want.items():
        g = got[key]
        ok = ok and type(g) is type(w)
        if isinstance(w, torch.Tensor):
            ok = ok and g.dtype == w.dtype and torch.equal(g, w) and gpu.placed(g)
        else:
            ok = ok and g == w
        if isinstance(w, tv_tensors.BoundingBoxes):
            ok = ok and g.canvas_size == w.canvas_size and g.format == w.format
    return ok
def epoch_again(loader, cpu):
    # Epoch 0 again on the device: (images unequal to the host loader's
    # batches cpu, images).
    loader.set_epoch(0)
    bad = images = 0
    for (ci, _), (gi, _) in zip(cpu, loader):
        loader._gpu.synchronize()
        images += len(gi)
        bad += sum(not torch.equal(a, b) for a, b in zip(ci, gi))
    return bad, images
FLOAT = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float, scale=True)])
UINT8 = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip()])
KW = dict(batch_size=4, collate_fn=collate_fn, seed=3, num_workers=2,
          arena_bytes=1 << 20)
"""


def run(fake, args, body, **env):
    return fake_gpu.run_script(fake, PRELUDE + textwrap.dedent(body), args, **env)


EQUAL = """
tf = {tf}
cpu = list(ringloader.DataLoader(coco(tf), **KW))
loader = ringloader.DataLoader(coco(tf), device="cuda", **KW)
gpu = loader._gpu
bad = images = resident = targets = batches = 0
for (ci, ct), (gi, gt) in zip(cpu, loader):
    gpu.synchronize()  # a consumer kernel runs once its stream is ready
    batches += 1
    for a, b in zip(ci, gi):
        images += 1
        resident += on_device(b)
        bad += a.shape != b.shape or not torch.allclose(a, b, rtol=0, atol=1e-6)
    targets += sum(same_target(g, w, gpu) for g, w in zip(gt, ct))
pinned = loader.pinned_slots
loader.close()
del gi, gt, b
report(bad=bad, images=images, resident=resident, targets=targets,
       batches=batches, cpu_batches=len(cpu), pinned=pinned)
"""


@pytest.mark.parametrize("tf", ["FLOAT", "UINT8"])
def test_detection_on_a_device_equals_the_cpu_loader(fake, coco, tf):
    r = run(fake, coco, EQUAL.format(tf=tf), FAKE_CUDA_DELAY_US=5000)
    assert r["violations"] == 0, r
    assert r["batches"] == r["cpu_batches"] == 5 and r["images"] == 18
    assert r["bad"] == 0 and r["targets"] == 18, r
    if tf == "UINT8":  # the images are the device buffer's regions, unconverted
        assert r["resident"] == 18, r
    assert r["copies"] == r["batches"]  # one copy a batch, its arena
    assert 1 <= r["pinned"] <= 4  # prefetch + 1 slots, never one per batch
    assert r["host"] == 0 and r["dev"] == 0, r  # pinned and device memory freed
    assert r["streams"] == 1, r  # the double's consumer stream only


LAZY = """
cpu = list(ringloader.DataLoader(coco(UINT8), **KW))
loader = ringloader.DataLoader(coco(UINT8), device="cuda", **KW)
got = list(loader)  # the host never waits during the epoch
loader._gpu.synchronize()
bad = sum(not torch.equal(a, b) for c, g in zip(cpu, got) for a, b in zip(c[0], g[0]))
report(bad=bad)
"""


# Without the consumer's wait (RINGLOADER_CUDA_BREAK) the images are read
# before their copy ran and the poison shows: copies of 0.2 s each, as
# test_cuda_fake's.
WAITS = {"kept": (False, 50000), "broken": (True, 200000)}


@pytest.mark.parametrize("wait", sorted(WAITS))
def test_a_lazy_consumer_sees_complete_images_by_the_wait(fake, coco, wait):
    broken, delay_us = WAITS[wait]
    env = dict(RINGLOADER_CUDA_BREAK="wait") if broken else {}
    r = run(fake, coco, LAZY, FAKE_CUDA_DELAY_US=delay_us, **env)
    assert (r["bad"] > 0) == broken, r
    if not broken:
        assert r["violations"] == 0, r


MID_EPOCH = """
loader = ringloader.DataLoader(coco(FLOAT), device="cuda", **KW)
got, error = 0, None
try:
    for images, targets in loader:
        got += 1
except Exception as e:
    error = f"{type(e).__name__}: {e}"
loader.close()
del loader
report(got=got, error=error)
"""


def _broken(tmp_path, how):
    data = coco_json(18, seed=4)
    root, ann = write_coco(tmp_path, 18, seed=4, data=data)
    image = data["images"][9]  # in the third batch of four
    if how == "jpeg":
        with open(os.path.join(root, image["file_name"]), "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 not a jpeg")
    else:
        ann_of = [a for a in data["annotations"] if a["image_id"] == image["id"]]
        if not ann_of:  # (every fifth image has none)
            image = data["images"][10]
            ann_of = [a for a in data["annotations"] if a["image_id"] == image["id"]]
        ann_of[0]["bbox"] = [1, 2, 3]
        with open(ann, "w") as f:
            json.dump(data, f)
    return root, ann


@pytest.mark.parametrize("how", ["jpeg", "bbox"])
def test_an_error_mid_epoch_leaks_nothing(fake, tmp_path, how):
    """on_error="raise": a JPEG that does not decode (the core's error) or
    an annotation that cannot be read (the front door's, raised after the
    batch came off the device) raises at its batch; closing frees every
    pinned slot, device buffer and the copy stream, with no copy rule
    broken."""
    r = run(fake, _broken(tmp_path, how), MID_EPOCH, FAKE_CUDA_DELAY_US=5000)
    assert r["got"] == 2, r
    want = "DecodeError" if how == "jpeg" else "bbox [1, 2, 3] is not 4 numbers"
    assert want in r["error"], r
    assert r["violations"] == 0, r
    assert r["host"] == 0 and r["dev"] == 0 and r["streams"] == 1, r


PAST_THE_ARENA = """
kw = dict(KW, arena_bytes={arena})
host = ringloader.DataLoader(coco(UINT8), **kw)
cpu = list(host)
host.close()
loader = ringloader.DataLoader(coco(UINT8), device="cuda", **kw)
gpu = loader._gpu
bad = images = resident = 0
for (ci, ct), (gi, gt) in zip(cpu, loader):
    gpu.synchronize()
    for a, b in zip(ci, gi):
        images += 1
        resident += on_device(b)
        bad += a.shape != b.shape or not torch.equal(a, b)
    bad += not all(same_target(g, w, gpu) for g, w in zip(gt, ct))
past = loader.stats()["past_arena"]
loader.close()
del gi, gt, b
report(bad=bad, images=images, resident=resident, past=past, batches=len(cpu))
"""

# Room for one or two of a batch's images (8 to 47 pixels a side, uint8),
# or for none.
ARENAS = {"some fit": 6000, "none fits": 1}


@pytest.mark.parametrize("arena", sorted(ARENAS))
def test_images_past_the_arena_are_copied_from_a_spill_buffer(fake, coco, arena):
    """An image its batch's arena has no room left for keeps its own host
    buffer, copied after the arena into the batch's spill buffer (the
    allocator's): the batches equal the host loader's, every image on the
    device, one more copy an image past the arena, nothing left after."""
    r = run(
        fake,
        coco,
        PAST_THE_ARENA.format(arena=ARENAS[arena]),
        FAKE_CUDA_ALLOW_PAGEABLE=1,  # the images past the arena are pageable
        FAKE_CUDA_DELAY_US=5000,
    )
    assert r["violations"] == 0, r
    assert r["images"] == 18 and r["bad"] == 0 and r["resident"] == 18, r
    if arena == "none fits":
        assert r["past"] == 18, r
    else:
        assert 0 < r["past"] < 18, r
    assert r["copies"] == r["batches"] + r["past"], r  # the arena's, then each
    assert r["host"] == r["dev"] == r["events"] == 0, r
    assert r["streams"] == 1, r


def test_an_image_freed_before_its_copy_ran_is_caught(fake, coco):
    """RINGLOADER_CUDA_BREAK=spill frees the images past the arena as the
    batch is handed out, before their copies (0.1 s each) ran: the fake
    reads them when the copy runs and sees them freed or reused."""
    r = run(
        fake,
        coco,
        PAST_THE_ARENA.format(arena=1),
        FAKE_CUDA_ALLOW_PAGEABLE=1,
        FAKE_CUDA_DELAY_US=100000,
        RINGLOADER_CUDA_BREAK="spill",
    )
    assert r["violations"] > 0, r
    assert "pageable copy source freed or modified" in r["last"], r


SPILL_OUT_OF_MEMORY = """
kw = dict(KW, arena_bytes=1)
cpu = list(ringloader.DataLoader(coco(UINT8), **kw))
loader = ringloader.DataLoader(coco(UINT8), device="cuda", **kw)
got, error = 0, None
try:
    for images, targets in loader:
        got += 1
except MemoryError as e:
    error = str(e)
del os.environ["FAKE_CUDA_DEVICE_BYTES"]  # room again: the loader goes on
bad, images = epoch_again(loader, cpu)
loader.close()
del loader
report(got=got, error=error, bad=bad, images=images)
"""


def test_a_spill_buffer_out_of_device_memory_is_a_clear_error(fake, coco):
    """The device has room for the arenas' buffers (1 byte each) but not
    for a spill buffer: the batch fails with a MemoryError saying how much
    was asked for, why and what to raise; nothing is left allocated, and
    once there is room the loader gives the host loader's batches."""
    r = run(
        fake,
        coco,
        SPILL_OUT_OF_MEMORY,
        FAKE_CUDA_ALLOW_PAGEABLE=1,
        FAKE_CUDA_DEVICE_BYTES=64,
    )
    assert r["got"] == 0 and r["error"] is not None, r
    assert "samples past the arena of 1 bytes (raise arena_bytes)" in r["error"], r
    assert "cudaMalloc failed: out of memory" in r["error"], r
    assert r["images"] == 18 and r["bad"] == 0, r
    assert r["violations"] == 0, r
    assert r["host"] == r["dev"] == r["events"] == 0, r


INTERRUPTED = """
import signal, sys

def preempted(signum, frame):  # a SIGTERM handler, as preemption hooks are
    sys.exit(143)

signal.signal(signal.SIGTERM, preempted)

class Interrupted(fake_gpu.FakeGpu):
    armed, raised = True, False

    def alloc(self, nbytes):
        if nbytes > 1 and Interrupted.armed:  # a spill buffer (arenas: 1 byte)
            Interrupted.armed = False
            try:
                signal.raise_signal(signal.{sig})  # in the allocator
                nbytes += 0
            except {exc}:
                Interrupted.raised = True
                raise
        return super().alloc(nbytes)

ringloader._gpu.gpu_class = Interrupted
kw = dict(KW, arena_bytes=1)
cpu = list(ringloader.DataLoader(coco(UINT8), **kw))
loader = ringloader.DataLoader(coco(UINT8), device="cuda", **kw)
try:
    for images, targets in loader:
        pass
    outcome = "not interrupted"
except {exc}:
    outcome = "{exc}"
except Exception as e:  # swallowed into the batch's error
    outcome = f"{{type(e).__name__}}: {{e}}"
bad, images = epoch_again(loader, cpu)
loader.close()
del loader
report(outcome=outcome, raised=Interrupted.raised, bad=bad, images=images)
"""


@pytest.mark.parametrize(
    "sig,exc", [("SIGINT", "KeyboardInterrupt"), ("SIGTERM", "SystemExit")]
)
def test_ctrl_c_in_the_spill_allocator_is_raised(fake, coco, sig, exc):
    """A Ctrl-C (or a SIGTERM whose handler exits) that lands inside the
    allocator of a spill buffer (called from the core while next() waits
    without the GIL) is raised from the loop as it was, KeyboardInterrupt
    or SystemExit, not turned into the batch's error; nothing is left
    allocated, and iterating the epoch again gives the host loader's
    batches."""
    r = run(
        fake, coco, INTERRUPTED.format(sig=sig, exc=exc), FAKE_CUDA_ALLOW_PAGEABLE=1
    )
    assert r["raised"], r  # inside the allocator
    assert r["outcome"] == exc, r
    assert r["images"] == 18 and r["bad"] == 0, r
    assert r["violations"] == 0, r
    assert r["host"] == r["dev"] == r["events"] == 0, r


REPLACED = """
loader = ringloader.DataLoader(coco(UINT8), device="cuda", **KW)
gpu = loader._gpu
natively = len(list(loader))
ds = loader.dataset
ds.transforms = v2.Compose([v2.ToImage(), v2.Lambda(lambda x: x)])
want = list(torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=collate_fn))
bad = images = 0
for (wi, wt), (gi, gt) in zip(want, loader):
    for a, b in zip(wi, gi):
        images += 1
        bad += not gpu.placed(b) or not torch.equal(a, b)
    bad += not all(same_target(g, w, gpu) for g, w in zip(gt, wt))
loader.close()
del gi, gt, b
report(bad=bad, images=images, natively=natively)
"""


def test_an_epoch_read_by_torchs_dataloader_is_placed_on_the_device(fake, coco):
    """The dataset's transforms replaced by ones not run natively: that
    epoch is torch's DataLoader's (test_transforms_replaced.py), each of
    its images and targets placed on the device; nothing is left after."""
    r = run(fake, coco, REPLACED, FAKE_CUDA_DELAY_US=5000)
    assert r["natively"] == 5 and r["images"] == 18 and r["bad"] == 0, r
    assert r["violations"] == 0, r
    assert r["host"] == 0 and r["dev"] == 0 and r["streams"] == 1, r


SEGMENTATION = """
root = sys.argv[1]
tf = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float, scale=True)])
def voc():
    ds = datasets.VOCSegmentation(root, year="2012", image_set="train", transforms=tf)
    return datasets.wrap_dataset_for_transforms_v2(ds)
kw = dict(KW, batch_size=3)
cpu = list(ringloader.DataLoader(voc(), **kw))
loader = ringloader.DataLoader(voc(), device="cuda", **kw)
assert isinstance(loader, ringloader.DataLoader)
gpu = loader._gpu
bad = masks = 0
for (ci, cm), (gi, gm) in zip(cpu, loader):
    gpu.synchronize()
    for a, b in zip(ci, gi):
        bad += a.shape != b.shape or not torch.allclose(a, b, rtol=0, atol=1e-6)
    for a, b in zip(cm, gm):
        masks += 1
        bad += type(a) is not type(b) or not torch.equal(a, b) or not gpu.placed(b)
loader.close()
del gi, gm, b
report(bad=bad, masks=masks, batches=len(cpu))
"""


def test_segmentation_on_a_device_equals_the_cpu_loader(fake, tmp_path):
    root = write_voc(tmp_path, 7, seed=2)
    r = run(fake, [root], SEGMENTATION, FAKE_CUDA_DELAY_US=5000)
    assert r["violations"] == 0 and r["bad"] == 0 and r["masks"] == 7, r
    assert r["copies"] == r["batches"] == 3
    assert r["host"] == 0 and r["dev"] == 0 and r["streams"] == 1, r


def test_a_target_keeps_its_mapping_kind_on_the_device():
    """A target that is a defaultdict (or any dict subclass) is placed as a
    copy of its own kind: its default stays, each tensor is placed."""
    from collections import OrderedDict, defaultdict

    import torch
    from ringloader._gpu import Gpu

    class Cloning(Gpu):  # no device here: placing is a copy
        def __init__(self):
            pass

        def to_device(self, t):
            return t.clone()

    boxes = torch.arange(8.0).view(2, 4)
    for target in (
        defaultdict(list, {"boxes": boxes, "image_id": 3}),
        OrderedDict(boxes=boxes, labels=[torch.ones(2)]),
    ):
        out = Cloning().place(target)
        assert type(out) is type(target)
        assert torch.equal(out["boxes"], boxes) and out["boxes"] is not boxes
    assert out["labels"][0] is not target["labels"][0]
    assert Cloning().place(defaultdict(list, {})).default_factory is list
