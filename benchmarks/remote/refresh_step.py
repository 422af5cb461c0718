#!/usr/bin/env python3
"""What a training step costs while ringloader makes S3 URLs again.

Presigned S3 URLs expire, so a loader over s3:// makes them again on a
thread of its own (every 10 minutes with temporary credentials, daily with
long-term keys); for many objects that is minutes of Python (about 0.13 ms
per URL). Its thread hands the GIL back after each URL. This measures a
small training step (forward and backward of an MLP on the CPU, one torch
thread) alone, while the loader's own ``Client.fetch_urls`` runs on a
background thread, and while the same URLs are presigned without handing
the GIL back. Nothing is fetched: presigning needs no server.

  python benchmarks/remote/refresh_step.py [--steps 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import threading
import time

import boto3
import torch
from botocore.config import Config

from ringloader.datasets.remote import Client


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    s3 = boto3.session.Session().client(
        "s3",
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="example-secret",
        config=Config(signature_version="s3v4"),
    )
    client = Client(s3_client=s3)
    names = [f"s3://bucket/train/{i:08d}.jpg" for i in range(2000)]
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 256)

    def step() -> float:
        t = time.perf_counter()
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return time.perf_counter() - t

    def holding_the_gil() -> None:
        for name in names:
            bucket, key = name[5:].split("/", 1)
            s3.generate_presigned_url(
                "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=3600
            )

    def measure(background) -> tuple[float, float]:
        done = threading.Event()

        def run() -> None:
            while not done.is_set():
                background()

        worker = threading.Thread(target=run, daemon=True) if background else None
        if worker is not None:
            worker.start()
            time.sleep(0.2)
        steps = sorted(step() for _ in range(args.steps))
        done.set()
        if worker is not None:
            worker.join()
        return statistics.mean(steps) * 1e3, steps[int(0.9 * len(steps))] * 1e3

    cases = {
        "alone": None,
        "during a refresh (Client.fetch_urls, the loader's)": lambda: client.fetch_urls(
            names
        ),
        "during a refresh that holds the GIL": holding_the_gil,
    }
    print(
        f"{platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, "
        f"boto3 {boto3.__version__}; {args.steps} steps, rounds {args.rounds}"
    )
    print(f"{'training step':<52} {'mean ms':>8} {'p90 ms':>8}")
    for _ in range(args.rounds):
        for label, background in cases.items():
            mean, p90 = measure(background)
            print(f"{label:<52} {mean:8.2f} {p90:8.2f}")


if __name__ == "__main__":
    main()
