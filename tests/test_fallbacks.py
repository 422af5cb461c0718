"""Falling back to torch's DataLoader works: on ringloader's own datasets
torchvision's transforms get PIL images; a script that replaced
torch.utils.data.DataLoader with ringloader.DataLoader falls back without
recursing; the reason given is the real one; a Python tail runs torch's
ops on one thread."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import warnings

import pytest
import torch

import ringloader
from images import jpeg_bytes

tv = pytest.importorskip("torchvision")
from torchvision import transforms as v1  # noqa: E402

README_TF = v1.Compose(
    [v1.RandomResizedCrop(16), v1.RandomHorizontalFlip(), v1.ToTensor()]
)


class MultiView:
    """Two views of each image: no fixed output, so ringloader falls back."""

    def __call__(self, img):
        return README_TF(img), README_TF(img)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("fb")
    for c in ("a", "b"):
        (root / c).mkdir()
        for i in range(3):
            (root / c / f"{i}.jpg").write_bytes(jpeg_bytes("baseline", 24, 20))
    tar = root / "shard.tar"
    with tarfile.open(tar, "w") as t:
        for i in range(4):
            data = jpeg_bytes("baseline", 24, 20)
            for name, blob in ((f"{i}.jpg", data), (f"{i}.cls", str(i % 2).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                t.addfile(info, io.BytesIO(blob))
    return root


def datasets_of(root, transform):
    paths = [str(root / "a" / f"{i}.jpg") for i in range(3)]
    return [
        ringloader.ImageFolder(str(root), transform=transform),
        ringloader.FileList(paths, [0, 1, 0], transform=transform),
        ringloader.TarShards([str(root / "shard.tar")], transform=transform),
    ]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_fallback_runs_torchvision_transforms_on_our_datasets(files, index):
    ds = datasets_of(files, MultiView())[index]
    with pytest.warns(
        ringloader.FallbackWarning, match="not a torchvision or timm transform"
    ):
        loader = ringloader.DataLoader(ds, batch_size=2)
    (v1_, v2_), labels = next(iter(loader))
    assert v1_.shape == v2_.shape == (2, 3, 16, 16) and v1_.dtype == torch.float32


def test_reason_names_a_foreign_first_transform(files):
    class RandomResizedCropAndInterpolation:  # timm's, by name and module
        def __call__(self, img):
            return v1.RandomResizedCrop(16)(img)

    tf = v1.Compose([RandomResizedCropAndInterpolation(), v1.ToTensor()])
    ds = ringloader.ImageFolder(str(files), transform=tf)
    with pytest.warns(ringloader.FallbackWarning) as w:
        ringloader.DataLoader(ds, batch_size=2)
    message = str(w[0].message)
    assert (
        "RandomResizedCropAndInterpolation is not a torchvision or timm transform"
        in message
    )
    assert "fixed output size" not in message


PATCHED = r"""
import sys, warnings
import torch, torch.utils.data
import ringloader
from torchvision import transforms as v1
torch.utils.data.DataLoader = ringloader.DataLoader      # speed up a script one does not own
warnings.simplefilter("ignore", ringloader.FallbackWarning)
fast = torch.utils.data.DataLoader(ringloader.ImageFolder(sys.argv[1],
    transform=v1.Compose([v1.Resize((8, 8)), v1.PILToTensor()])), batch_size=2)
slow = torch.utils.data.DataLoader(range(5), batch_size=2)   # falls back: not images
assert type(fast) is ringloader.DataLoader and isinstance(slow, torch.utils.data.DataLoader)
print(sum(len(b) for b in slow), sum(len(l) for _, l in fast))
"""


def test_patched_torch_dataloader_falls_back_without_recursing(files, tmp_path):
    script = tmp_path / "patched.py"
    script.write_text(PATCHED)
    proc = subprocess.run(
        [sys.executable, str(script), str(files)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["5", "6"]


def test_python_tail_runs_on_one_torch_thread(files):
    seen = []

    class Record:
        def __call__(self, x):
            seen.append(torch.get_num_threads())
            return x

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        tf = v1.Compose([v1.Resize((8, 8)), v1.PILToTensor(), Record()])
        ds = ringloader.ImageFolder(str(files), transform=tf)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ringloader.FallbackWarning)
            loader = ringloader.Loader(ds, batch_size=3, num_threads=1)
        batches = list(loader)
        assert len(batches) == 2 and seen == [1] * 6
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
