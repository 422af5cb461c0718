"""Accelerate in one process: the steps of the test, over ringloader.DataLoader
or torch's (argv: jpeg, output folder, kind)."""

import json
import os
import sys
import warnings
import torch
import torchvision.transforms as TV
from accelerate import Accelerator
import ringloader

warnings.simplefilter("error", ringloader.FallbackWarning)
jpeg, out = sys.argv[1], sys.argv[2]
N = 23
ds = ringloader.FileList(
    [jpeg] * N,
    list(range(N)),
    transform=TV.Compose([TV.Resize((8, 8)), TV.PILToTensor()]),
)
acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
kind = sys.argv[3]  # "ringloader", or "torch": DataLoader over the indices


def make():
    gen = torch.Generator().manual_seed(1)
    if kind == "torch":
        loader = torch.utils.data.DataLoader(
            range(N), batch_size=4, shuffle=True, generator=gen
        )
    else:
        loader = ringloader.DataLoader(ds, batch_size=4, shuffle=True, generator=gen)
    return acc.prepare(loader)


def labels_of(batch):
    return (batch[1] if kind == "ringloader" else batch).tolist()


loader = make()
result = {"type": type(loader.base_dataloader).__module__}
full, syncs = [], []
for batch in loader:
    with acc.accumulate():
        syncs.append(acc.sync_gradients)
    full.append(labels_of(batch))
result["full"], result["syncs"] = full, syncs
skipper = acc.skip_first_batches(loader, 2)
result["skipped_type"] = type(skipper.base_dataloader).__module__
result["skipped"] = [labels_of(b) for b in skipper]
# ringloader only (torch's DataLoader has no state_dict): checkpoint after 2
# batches of a fresh loader, resume in another
if kind == "ringloader":
    loader = make()
    acc.register_for_checkpointing(loader)
    for i, _batch in enumerate(loader):
        if i == 1:
            acc.save_state(os.path.join(out, "ckpt"))
            break
    loader2 = make()
    acc._custom_objects = [loader2]
    acc.load_state(os.path.join(out, "ckpt"))
    result["resumed"] = [labels_of(b) for b in loader2]
with open(os.path.join(out, f"{kind}.json"), "w") as f:
    json.dump(result, f)
