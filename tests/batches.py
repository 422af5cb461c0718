"""Batches compared as the dataset tests compare them: the same labels
and the same pixels, bit for bit, batch by batch."""

from __future__ import annotations

import torch


def same_batches(a, b) -> None:
    """Assert that two lists of (images, labels) batches are equal."""
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(ya, yb)
        assert torch.equal(xa, xb)
