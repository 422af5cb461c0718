"""Accelerate on several processes (torchrun): ringloader.DataLoader and torch's
over the same indices, prepared together (argv: jpeg, output folder)."""

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
ours = ringloader.DataLoader(
    ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1)
)
ref = torch.utils.data.DataLoader(
    range(N), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1)
)
acc = Accelerator(cpu=True)
ours, ref = acc.prepare(ours, ref)
result = {
    "type": type(ours.base_dataloader).__module__,
    "len": len(ours),
    "epochs": [],
    "ref": [],
    "ends": [],
}
for _epoch in range(2):
    got, ends = [], []
    for images, labels in ours:
        got.append(labels.tolist())
        ends.append(acc.gradient_state.end_of_dataloader)
        assert images.device.type == acc.device.type
    result["epochs"].append(got)
    result["ends"].append(ends)
    result["ref"].append([b.tolist() for b in ref])
skipped = acc.skip_first_batches(ours, 2)
result["skipped_type"] = type(skipped.base_dataloader).__module__
result["skipped"] = [labels.tolist() for _, labels in skipped]
with open(os.path.join(out, f"acc-rank{acc.process_index}.json"), "w") as f:
    json.dump(result, f)
