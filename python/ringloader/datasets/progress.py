"""Progress bars of the datasets (indexing a folder or shards, presigning
S3 URLs): drawn by one process of a distributed run only, and only where
tqdm is installed.

Every rank of a DDP job builds the same dataset, so a bar drawn by each
would print world-size copies of the same line on the shared terminal.
Which process is the first: torch.distributed's rank where a process
group is up; before ``init_process_group`` (datasets are often built
first), the rank the launchers export (torchrun, and so Accelerate:
``RANK``; Lightning's own launcher: ``LOCAL_RANK`` and ``NODE_RANK``;
SLURM: ``SLURM_PROCID``)."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

__all__ = ["bar", "first_rank"]


def first_rank() -> bool:
    """Whether this process is rank 0 of its job (or in no job at all):
    the one that draws progress bars."""
    # torch.distributed cannot be initialised unless it was imported: do
    # not import torch here just to learn that.
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    for names in (("RANK",), ("LOCAL_RANK", "NODE_RANK"), ("SLURM_PROCID",)):
        values = [os.environ.get(name, "").strip() for name in names]
        if values[0]:
            # A value that is not a number says nothing: draw the bar.
            return all(not v.isdigit() or int(v) == 0 for v in values)
    return True


def bar(total: int, **tqdm_args: Any) -> Optional[Any]:
    """A tqdm bar over ``total`` steps, or None where tqdm is not installed
    or this process is not the first rank (see :func:`first_rank`)."""
    if not first_rank():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, **tqdm_args)
