"""Lightning DDP on 2 CPU processes over a Mix (argv: data folder, output
folder): Lightning rebuilds ringloader.DataLoader with its
DistributedSampler; each rank writes the labels it trained on per epoch."""

import json
import os
import sys
import warnings

import lightning as L
import torch

import ringloader
from ringloader import transforms as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mixdata  # noqa: E402

warnings.simplefilter("error", ringloader.FallbackWarning)
root, out = sys.argv[1], sys.argv[2]
N = 64
TRAIN = T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip()])


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3 * 8 * 8, 2)
        self.seen = []

    def train_dataloader(self):
        mix = mixdata.mix(root, TRAIN, N, replacement=True)
        return ringloader.DataLoader(mix, batch_size=8, shuffle=True)

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
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
result = {}
try:
    trainer.fit(model)
    loader = trainer.train_dataloader
    result["type"] = type(loader).__module__
    result["sampler"] = type(loader.sampler).__name__
except Exception as e:  # Lightning's teardown may raise over ours: say ours
    while e.__context__ is not None:
        e = e.__context__
    result["error"] = f"{type(e).__name__}: {e}"
result["seen"] = model.seen
with open(os.path.join(out, f"lightning-rank{trainer.global_rank}.json"), "w") as f:
    json.dump(result, f)
# After a failed fit, Lightning leaves the process group up; tearing it
# down at interpreter exit instead can abort in gloo's threads.
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
