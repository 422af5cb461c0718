"""Lightning DDP on 2 CPU processes (argv: jpeg, output folder, mode)."""

import json
import os
import sys
import warnings
import torch
import lightning as L
import torchvision.transforms as TV
import ringloader
from torch.utils.data import DistributedSampler

warnings.simplefilter("error", ringloader.FallbackWarning)
jpeg, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
N = 23


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3 * 8 * 8, 2)
        self.seen = []

    def train_dataloader(self):
        ds = ringloader.FileList(
            [jpeg] * N,
            list(range(N)),
            transform=TV.Compose([TV.Resize((8, 8)), TV.PILToTensor()]),
        )
        if mode == "own-sampler":
            return ringloader.DataLoader(
                ds, batch_size=4, sampler=DistributedSampler(ds, seed=3)
            )
        return ringloader.DataLoader(ds, batch_size=4, shuffle=True)

    def training_step(self, batch, i):
        images, labels = batch
        self.seen.append([self.current_epoch, labels.tolist()])
        return self.layer(images.flatten(1).float()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


L.seed_everything(3)
model = Model()
trainer = L.Trainer(
    accelerator="cpu",
    devices=2,
    strategy="ddp",
    max_epochs=2,
    use_distributed_sampler=(mode == "lightning-sampler"),
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
result = {}
try:
    trainer.fit(model)
    result["type"] = (
        type(trainer.train_dataloader).__name__
        + " "
        + type(trainer.train_dataloader).__module__
    )
except Exception as e:  # Lightning's teardown may raise over ours: find ours
    while e is not None and not isinstance(e, ValueError):
        e = e.__context__
    result["error"] = str(e)
result["seen"] = model.seen
with open(os.path.join(out, f"{mode}-rank{trainer.global_rank}.json"), "w") as f:
    json.dump(result, f)
# After a failed fit, Lightning leaves the process group up; tearing it
# down at interpreter exit instead can abort in gloo's threads ("terminate
# called without an active exception"), as a user's script would see.
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
