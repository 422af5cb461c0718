"""Lightning in one process: stop mid-epoch with a checkpoint, resume from it
(argv: jpeg, output folder, phase: full, stop or resume)."""

import json
import os
import sys
import warnings
import torch
import lightning as L
import torchvision.transforms as TV
import ringloader

warnings.simplefilter("error", ringloader.FallbackWarning)
jpeg, out, phase = sys.argv[1], sys.argv[2], sys.argv[3]
N, STOP = 23, 3
ckpt = os.path.join(out, "mid.ckpt")


class Stop(Exception):
    pass


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
        return ringloader.DataLoader(ds, batch_size=4, shuffle=True)

    def training_step(self, batch, i):
        images, labels = batch
        self.seen.append(labels.tolist())
        return self.layer(images.flatten(1).float()).sum()

    def on_train_batch_end(self, outputs, batch, i):
        if phase == "stop" and self.global_step == STOP:
            self.trainer.save_checkpoint(ckpt)
            raise Stop

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


L.seed_everything(3)
model = Model()
trainer = L.Trainer(
    accelerator="cpu",
    devices=1,
    max_epochs=2,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
try:
    trainer.fit(model, ckpt_path=ckpt if phase == "resume" else None)
except Stop:
    pass
with open(os.path.join(out, f"resume-{phase}.json"), "w") as f:
    json.dump(model.seen, f)
