"""The real GPU path. These run only where torch sees a CUDA device; the
same behaviour is checked everywhere else through the fake runtime
(test_cuda_fake.py)."""

import pytest
import torch

import ringloader
from ringloader import transforms as T

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA device (the GPU path is covered "
        "by test_cuda_fake.py on this machine)",
    ),
]

TRAIN = T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip()])


def test_device_batches_equal_the_cpu_path(folder):
    ds = ringloader.ImageFolder(folder)
    cpu = ringloader.Loader(ds, batch_size=4, transform=TRAIN, seed=3)
    gpu = ringloader.Loader(ds, batch_size=4, transform=TRAIN, seed=3, device="cuda")
    for (a, la), (b, lb) in zip(cpu, gpu):
        assert b.device.type == "cuda"
        assert torch.equal(a, b.cpu()) and torch.equal(la, lb)


def test_normalised_output_on_the_device(folder):
    ds = ringloader.ImageFolder(folder)
    t = T.Compose(
        [
            T.Resize(128),
            T.CenterCrop(96),
            T.ToDtype(torch.float16, scale=True),
            T.Normalize([0.5] * 3, [0.25] * 3),
        ]
    )
    cpu = ringloader.Loader(ds, batch_size=4, transform=t, layout="channels_last")
    gpu = ringloader.Loader(
        ds, batch_size=4, transform=t, layout="channels_last", device="cuda"
    )
    for (a, _), (b, _) in zip(cpu, gpu):
        assert b.dtype == torch.float16
        assert b.is_contiguous(memory_format=torch.channels_last)
        assert (a.float() - b.float().cpu()).abs().max().item() < 1e-2


def test_copy_overlaps_decoding(folder):
    # The stall fraction with the copy is within 5 points of the CPU path's.
    ds = ringloader.ImageFolder(folder)

    def stall(device):
        loader = ringloader.Loader(
            ds, batch_size=6, transform=TRAIN, num_threads=2, device=device
        )
        for _ in range(3):
            for images, _ in loader:
                images.float().mean()  # the training step
        return loader.stats()["stall_fraction"]

    assert abs(stall("cuda") - stall("cpu")) <= 0.05


def test_pinned_memory_is_freed_on_close(folder):
    ds = ringloader.ImageFolder(folder)
    gpu = ringloader.Loader(ds, batch_size=4, transform=TRAIN, device="cuda")
    for _ in gpu:
        pass
    assert gpu.pinned_slots > 0
    gpu.close()
    assert gpu.pinned_slots == 0


def test_augment_ops_and_cutmix_on_the_device(folder):
    """Ops run in C before the copy; CutMix/MixUp act on the device batch."""
    from torchvision.transforms import v2

    ds = ringloader.ImageFolder(folder)
    t = v2.Compose(
        [
            v2.RandomResizedCrop(96),
            v2.RandomHorizontalFlip(),
            v2.TrivialAugmentWide(),
            v2.ColorJitter(0.4, 0.4, 0.4),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
        ]
    )
    cpu = ringloader.Loader(ds, batch_size=4, transform=t, seed=3)
    gpu = ringloader.Loader(ds, batch_size=4, transform=t, seed=3, device="cuda")
    mix = v2.RandomChoice([v2.CutMix(num_classes=10), v2.MixUp(num_classes=10)])
    for (a, la), (b, lb) in zip(cpu, gpu):
        assert b.is_cuda and torch.equal(a, b.cpu()) and torch.equal(la, lb)
        images, labels = mix(b, lb.cuda())
        assert images.is_cuda and labels.shape == (len(lb), 10)
