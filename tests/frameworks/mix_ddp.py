"""A Mix read by 2 torchrun processes (argv: data folder, output
folder): ringloader.DataLoader with torch's DistributedSampler, 2 epochs,
a resume from a rank's state_dict mid-epoch, a fresh loader whose sampler
alone is told epoch 3, torch seeded SEED + rank, then Accelerate's sharding
of the same Mix next to torch's DataLoader's. Writes what each rank got:
labels per batch (source * 1000 + index) and the images.
"""

import json
import os
import sys
import warnings

import torch
import torch.distributed as dist
import torchvision.transforms as TV
from accelerate import Accelerator
from torch.utils.data import DistributedSampler

import ringloader
from ringloader import transforms as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mixdata  # noqa: E402

warnings.simplefilter("error", ringloader.FallbackWarning)
root, out = sys.argv[1], sys.argv[2]
SEED, SAMPLER_SEED, N, BATCH, STOP = 7, 5, 80, 8, 2
TRAIN = T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip()])

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(SEED)  # the same on every rank (see test_mix_ddp.py)
mix = mixdata.mix(root, TRAIN, N, replacement=False)


def make():
    sampler = DistributedSampler(mix, shuffle=True, seed=SAMPLER_SEED)
    return ringloader.DataLoader(mix, batch_size=BATCH, sampler=sampler, num_workers=2)


def take(batches):
    labels, images = [], []
    for x, y in batches:
        labels.append(y.tolist())
        images.append(x.clone())
    return labels, (torch.cat(images) if images else torch.empty(0))


result = {"epochs": [], "len": None}
images = {}
loader = make()
result["len"] = len(loader)
for epoch in (0, 1):
    loader.set_epoch(epoch)  # ... and the sampler's
    labels, images[f"epoch{epoch}"] = take(loader)
    result["epochs"].append(labels)
# Resume: stop after STOP batches of epoch 1, go on in a new loader.
loader.set_epoch(1)
it = iter(loader)
for _ in range(STOP):
    next(it)
state = loader.state_dict()
loader.close()
resumed = make()
resumed.load_state_dict(state)
result["resumed"], images["resumed"] = take(resumed)
resumed.close()
# docs/distributed.md: rank 0's state loaded on every rank (load_state_dict
# keeps the loader's rank) resumes each rank's own draws.
shared = [state]
dist.broadcast_object_list(shared, src=0)
resumed = make()
resumed.load_state_dict(shared[0])
result["resumed_from_rank0"], images["resumed_from_rank0"] = take(resumed)
resumed.close()
torch.save(images, os.path.join(out, f"rank{rank}.pt"))

# A script restarted at epoch 3 that calls only its sampler's set_epoch.
fresh = make()
fresh.sampler.set_epoch(3)
result["sampler_epoch3"], _ = take(fresh)
fresh.close()
# Each rank seeding torch with SEED + rank (timm's train.py; Accelerate's
# set_seed(device_specific=True)): the loaders' seeds differ, the draws not.
torch.manual_seed(SEED + rank)
apart = make()
result["seed_plus_rank"], _ = take(apart)
apart.close()
torch.manual_seed(SEED)

# Accelerate: ringloader.DataLoader and torch's over an equal Mix (torch's
# indexes its own, told the epoch), prepared together.
# Bicubic without DCT scaling: ringloader's bytes are Pillow's.
bicubic = TV.InterpolationMode.BICUBIC
plain = TV.Compose([TV.Resize((8, 8), interpolation=bicubic), TV.PILToTensor()])
ours_mix = mixdata.mix(root, plain, N, replacement=True)
ref_mix = mixdata.mix(root, plain, N, replacement=True)
ours = ringloader.DataLoader(
    ours_mix,
    batch_size=BATCH,
    shuffle=True,
    generator=torch.Generator().manual_seed(1),
)
ref = torch.utils.data.DataLoader(
    ref_mix,
    batch_size=BATCH,
    shuffle=True,
    generator=torch.Generator().manual_seed(1),
)
acc = Accelerator(cpu=True)
ours, ref = acc.prepare(ours, ref)
result["acc_type"] = type(ours.base_dataloader).__module__
result["acc"], result["acc_ref"], result["acc_pixels_equal"] = [], [], []
for epoch in (0, 1):
    ref_mix.set_epoch(epoch)
    got = [(x, y.tolist()) for x, y in ours]
    want = [(x, y.tolist()) for x, y in ref]
    result["acc"].append([y for _, y in got])
    result["acc_ref"].append([y for _, y in want])
    result["acc_pixels_equal"].append(
        len(got) == len(want)
        and all(torch.equal(a, b) for (a, _), (b, _) in zip(got, want))
    )
# A fresh pair told set_epoch(3), as a script restarted at epoch 3: ours
# draws epoch 3 (the epoch Accelerate gives the sampler it wraps), torch's
# Mix the one Accelerate gives it.
pair = [
    cls(
        mix_, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(1)
    )
    for cls, mix_ in (
        (ringloader.DataLoader, ours_mix),
        (torch.utils.data.DataLoader, ref_mix),
    )
]
pair = acc.prepare(*pair)
for loader_ in pair:
    loader_.set_epoch(3)
result["acc_epoch3"], result["acc_ref_epoch3"] = [
    [y.tolist() for _, y in p] for p in pair
]

with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(result, f)
dist.barrier()
dist.destroy_process_group()
