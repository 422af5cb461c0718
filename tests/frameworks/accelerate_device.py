"""Accelerate's device placement on a CUDA device, with the fake CUDA runtime
(tests/cuda): ``prepare_data_loader(..., device=cuda:0, put_on_device=True)``,
what ``Accelerator.prepare`` calls on a GPU machine, hands the device to the
ringloader.DataLoader it builds, whose batches then come through the C
core's device copies; ``skip_first_batches`` keeps it. (argv: jpeg, output
folder; RINGLOADER_CUDART names the fake runtime.)

A CPU build of torch cannot make a CUDA tensor, so the shard itself is not
iterated here: its ``send_to_device`` is ``tensor.to(device)``, which
returns a tensor already on that device as it is."""

import ctypes
import json
import os
import sys
import warnings

import torch
import torchvision.transforms as TV
from accelerate.data_loader import DataLoaderShard, prepare_data_loader
from accelerate.data_loader import skip_first_batches

import ringloader

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cuda")
)
import fake_gpu  # noqa: E402

fake_gpu.install()
fake = ctypes.CDLL(os.environ["RINGLOADER_CUDART"])
warnings.simplefilter("error", ringloader.FallbackWarning)
jpeg, out = sys.argv[1], sys.argv[2]
N = 23
ds = ringloader.FileList(
    [jpeg] * N,
    list(range(N)),
    transform=TV.Compose(
        [TV.RandomResizedCrop(8), TV.PILToTensor(), TV.ConvertImageDtype(torch.float)]
    ),
)


def make():
    return ringloader.DataLoader(
        ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1)
    )


# The same construction without placement: the host path's batches.
host_shard = prepare_data_loader(make(), device=None, put_on_device=False)
host = [(x.clone(), y.tolist()) for x, y in host_shard.base_dataloader]
shard = prepare_data_loader(make(), device=torch.device("cuda", 0), put_on_device=True)
base = shard.base_dataloader
result = {
    "shard": isinstance(shard, DataLoaderShard),
    "host_device": str(host_shard.base_dataloader.device),
    "shard_device": str(shard.device),
    "base_type": type(base).__module__,
    "base_device": str(base.device),
    "gpu": type(base._gpu).__name__,
}
copies = fake.fake_cuda_copies()
placed = [(x.clone(), y.tolist()) for x, y in base]
result["device_copies"] = fake.fake_cuda_copies() - copies
result["violations"] = fake.fake_cuda_violations()
result["labels_equal"] = [y for _, y in placed] == [y for _, y in host]
result["images_equal"] = all(torch.equal(a, b) for (a, _), (b, _) in zip(placed, host))
result["batches"] = len(placed)
skipper = skip_first_batches(shard, 2)
result["skipped_base_device"] = str(skipper.base_dataloader.device)
result["skipped_labels"] = [y.tolist() for _, y in skipper.base_dataloader]
result["host_labels"] = [y for _, y in host]
with open(os.path.join(out, "acc-device.json"), "w") as f:
    json.dump(result, f)
