"""timm's train.py and validate.py flow with ringloader's create_loader.

timm's scripts are not in its PyPI package and this repository does not
carry other projects' code, so this test makes the calls those scripts
make (timm 1.0.31's train.py and validate.py, read from the
pytorch-image-models repository), with the arguments they pass, their
command-line defaults, and ``create_loader`` the only name changed:
``create_dataset`` for the train and validation splits,
``resolve_data_config`` from the model, ``FastCollateMixup`` as the
collate_fn under the prefetcher, ``create_loader`` with train.py's
``common_loader_kwargs`` and ``train_loader_kwargs`` (and its scheduled-size
arguments, unset), then a few steps of train.py's loop on a tiny timm model
on the CPU (mixup switched off as train.py does at ``mixup_off_epoch``),
and validate.py's loader and top-1 loop. The same with ``--dataset
hfds/<folder>`` (a Hugging Face dataset of Parquet files, loaded into the
cache ``--data-dir`` names), which ringloader reads through HFDataset.
"""

import math
import os
import warnings

import pytest
import torch

import ringloader
from ringloader.timm import create_loader

from test_hf_scripts import to_parquet
from test_timm_loader import make_folder

timm = pytest.importorskip("timm")
from timm.data import FastCollateMixup, create_dataset, resolve_data_config  # noqa: E402
from timm.loss import SoftTargetCrossEntropy  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("timmdata")
    make_folder(root / "train", per_class=6)
    make_folder(root / "validation", per_class=3)
    return str(root)


@pytest.fixture(scope="module")
def sources(data_dir, tmp_path_factory):
    """(dataset name, data dir) as train.py takes them (--dataset,
    --data-dir): the image folders, or the same images as a Hugging Face
    dataset of Parquet files, loaded into a cache folder."""
    tmp = tmp_path_factory.mktemp("timmhf")
    splits = {s: os.path.join(data_dir, s) for s in ("train", "validation")}
    src = to_parquet(splits, str(tmp / "src"))
    return {"folder": ("", data_dir), "hfds": (f"hfds/{src}", str(tmp / "cache"))}


def train_loaders(data_dir, model, prefetcher, name=""):
    """train.py's datasets and loaders (its argument defaults; mixup and
    cutmix on, random erasing 0.25 as the ImageNet recipes set them)."""
    args = dict(
        batch_size=4,
        reprob=0.25,
        remode="pixel",
        recount=1,
        resplit=False,
        scale=[0.08, 1.0],
        ratio=[3.0 / 4.0, 4.0 / 3.0],
        hflip=0.5,
        vflip=0.0,
        color_jitter=0.4,
        aa=None,
        aug_repeats=0,
        train_interpolation="random",
        workers=2,
        worker_seeding="all",
        pin_mem=False,
        mixup=0.8,
        cutmix=1.0,
        smoothing=0.1,
    )
    data_config = resolve_data_config({"input_size": (3, 32, 32)}, model=model)
    dataset_train = create_dataset(
        name,
        root=data_dir,
        split="train",
        is_training=True,
        class_map="",
        download=False,
        batch_size=args["batch_size"],
        seed=42,
        repeats=0,
        input_img_mode="RGB",
        input_key=None,
        target_key=None,
        num_samples=None,
        trust_remote_code=False,
    )
    dataset_eval = create_dataset(
        name,
        root=data_dir,
        split="validation",
        is_training=False,
        class_map="",
        download=False,
        batch_size=args["batch_size"],
        input_img_mode="RGB",
        input_key=None,
        target_key=None,
        num_samples=None,
        trust_remote_code=False,
    )
    common_loader_kwargs = dict(
        mean=data_config["mean"],
        std=data_config["std"],
        pin_memory=args["pin_mem"],
        img_dtype=torch.float32,
        device=CPU,
        distributed=False,
        use_prefetcher=prefetcher,
    )
    train_loader_kwargs = dict(
        batch_size=args["batch_size"],
        is_training=True,
        no_aug=False,
        re_prob=args["reprob"],
        re_mode=args["remode"],
        re_count=args["recount"],
        re_split=args["resplit"],
        train_crop_mode=None,
        scale=args["scale"],
        ratio=args["ratio"],
        hflip=args["hflip"],
        vflip=args["vflip"],
        color_jitter=args["color_jitter"],
        color_jitter_prob=None,
        grayscale_prob=0.0,
        gaussian_blur_prob=0.0,
        auto_augment=args["aa"],
        num_aug_repeats=args["aug_repeats"],
        num_aug_splits=0,
        interpolation=args["train_interpolation"],
        num_workers=args["workers"],
        worker_seeding=args["worker_seeding"],
    )
    mixup_args = dict(
        mixup_alpha=args["mixup"],
        cutmix_alpha=args["cutmix"],
        cutmix_minmax=None,
        prob=1.0,
        switch_prob=0.5,
        mode="batch",
        label_smoothing=args["smoothing"],
        num_classes=3,
    )
    collate_fn = FastCollateMixup(**mixup_args) if prefetcher else None
    loader_train = create_loader(
        dataset_train,
        input_size=data_config["input_size"],
        input_size_choices=None,
        batch_size_choices=None,
        batch_choice_weights=None,
        batch_choice_seed=42,
        batch_choice_schedule="constant",
        batch_schedule_epochs=None,
        batch_schedule_spread=0.65,
        batch_schedule_random_mix=0.1,
        num_batches=None,
        collate_fn=collate_fn,
        use_multi_epochs_loader=False,
        **common_loader_kwargs,
        **train_loader_kwargs,
    )
    loader_eval = create_loader(
        dataset_eval,
        input_size=data_config["input_size"],
        batch_size=args["batch_size"],
        is_training=False,
        interpolation=data_config["interpolation"],
        num_workers=args["workers"],
        crop_pct=data_config["crop_pct"],
        **common_loader_kwargs,
    )
    return loader_train, loader_eval, collate_fn


def validate_loader(data_dir, model, name=""):
    """validate.py's dataset and loader (its argument defaults)."""
    data_config = resolve_data_config({"input_size": (3, 32, 32)}, model=model)
    dataset = create_dataset(
        root=data_dir,
        name=name,
        split="validation",
        download=False,
        load_bytes=False,
        class_map="",
        num_samples=None,
        input_key=None,
        input_img_mode="RGB",
        target_key=None,
        trust_remote_code=False,
        seed=42,
    )
    return create_loader(
        dataset,
        input_size=data_config["input_size"],
        batch_size=4,
        use_prefetcher=True,
        interpolation=data_config["interpolation"],
        mean=data_config["mean"],
        std=data_config["std"],
        num_workers=4,
        crop_pct=data_config["crop_pct"],
        crop_mode=data_config["crop_mode"],
        crop_border_pixels=None,
        pin_memory=False,
        device=CPU,
        img_dtype=torch.float32,
        tf_preprocessing=False,
    )


def top1(model, loader):
    model.eval()
    right = seen = 0
    with torch.inference_mode():
        for x, y in loader:
            right += int((model(x).argmax(1) == y).sum())
            seen += len(y)
    return right / seen, seen


@pytest.mark.parametrize("source", ["folder", "hfds"])
@pytest.mark.parametrize("prefetcher", [True, False])
def test_train_and_validate_flow(sources, source, prefetcher):
    name, data_dir = sources[source]
    torch.manual_seed(0)
    model = timm.create_model("test_efficientnet", num_classes=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        loader_train, loader_eval, collate_fn = train_loaders(
            data_dir, model, prefetcher, name
        )
        loader_validate = validate_loader(data_dir, model, name)
    assert len(loader_train) == 18 // 4  # drop_last for training
    loss_fn = SoftTargetCrossEntropy() if collate_fn else torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for epoch in range(2):
        if epoch == 1 and prefetcher:
            loader_train.mixup_enabled = False  # train.py at mixup_off_epoch
        model.train()
        for x, y in loader_train:
            assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32
            assert y.shape == ((4, 3) if collate_fn else (4,))
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert len(losses) == 8 and all(math.isfinite(v) for v in losses)
    acc, seen = top1(model, loader_eval)
    assert seen == 9 and 0 <= acc <= 1
    acc2, seen2 = top1(model, loader_validate)
    assert seen2 == 9 and acc2 == acc  # the same eval transform either way


def test_device_handling_with_the_fake_cuda_runtime(data_dir, tmp_path):
    """create_loader(..., device=cuda) as train.py and validate.py call it,
    under the fake CUDA runtime (tests/cuda/timm_device.py, in its own
    process: the runtime is loaded once per process). With the prefetcher
    the batches come through the loader's own GPU path (FakeGpu, pinned
    slots, the fake's copies) and equal the host path's in each img_dtype;
    (float32 within 1e-6: the device's addcmul and the C core's Normalize
    may round the last bit apart); timm's RandomErasing runs on the device
    after Normalize; mixup/cutmix
    (FastCollateMixup, every mode) is done on the device, equal to timm's
    collate + PrefetchLoader on the host, and so are re_split's batches;
    without the prefetcher the
    batches stay on the host, as timm's. No violation, nothing leaked."""
    import json
    import os
    import subprocess
    import sys

    cuda = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda")
    sys.path.insert(0, cuda)
    import fake_gpu

    lib = fake_gpu.build(str(tmp_path / "fake_cudart.so"))
    out = tmp_path / "timm-device.json"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(cuda, "timm_device.py"),
            os.path.join(data_dir, "train"),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1", RINGLOADER_CUDART=lib),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(out.read_text())
    for dtype in ("float32", "float16", "bfloat16"):
        r = got[f"eval-torch.{dtype}"]
        assert (r["type"], r["gpu"], r["dtype"]) == (
            "_OnDevice",
            "FakeGpu",
            f"torch.{dtype}",
        )
        assert r["pinned"] > 0 and r["copies"] >= 3, r
        assert r["equal"], r
    r = got["train-erase"]
    assert r["gpu"] == "FakeGpu" and r["copies"] >= 4 and r["labels_equal"]
    assert r["other"] == 0 and r["erased"] > 0 and r["kept"] > 10 * r["erased"]
    for mode in ("batch", "elem", "pair", "half"):
        r = got[f"mixup-{mode}"]
        assert (r["type"], r["gpu"]) == ("_MixOnDevice", "FakeGpu"), r
        assert r["copies"] >= 4 and r["equal"], r
        n = 2 if mode == "half" else 4
        assert r["shape"] == [n, 3, 32, 32, n, 3], r
    r = got["re-split"]
    assert (r["type"], r["gpu"], r["equal"]) == ("_MixOnDevice", "FakeGpu", True), r
    for training in (True, False):
        r = got[f"no-prefetcher-{training}"]
        assert r["device"] == "cpu" and r["copies"] == 0 and r["gpu"] == "NoneType"
        assert r["equal"], r
    assert (got["violations"], got["last"]) == (0, "")
    assert got["host"] == 0 and got["dev"] == 0
