"""The iterator of one epoch of a Loader: the generator that runs it, ended
by a newer iter(loader) or by close(), iterated by one thread at a time."""

from __future__ import annotations

import threading
from typing import Iterator

import torch


SUPERSEDED = (
    "this iterator was ended by a newer iter(loader): a ringloader Loader runs "
    "one epoch at a time (use two Loaders to iterate twice at once)"
)


class EpochIterator:
    """One epoch of a Loader: the generator that runs it, whether a newer
    iter(loader) has taken its place, and whether the loader was closed.

    One thread at a time runs the generator. Python raises ValueError
    ("generator already executing") when a second thread enters a running
    generator, which a close() from another thread would do: here such a
    close() only marks the epoch closed (the Loader then closes its
    pipeline, which ends the iterating thread's wait with RuntimeError), and
    a second thread's next() is refused with RuntimeError."""

    def __init__(self, gen: Iterator) -> None:
        self._gen = gen
        self.superseded = False
        self._closed = False
        self._running = threading.Lock()  # held while a thread runs _gen

    def __iter__(self) -> "EpochIterator":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.superseded:
            raise RuntimeError(SUPERSEDED)
        if not self._running.acquire(blocking=False):
            raise RuntimeError(
                "this epoch is being iterated (or closed) by another thread: "
                "a ringloader Loader's epoch is iterated by one thread at a time"
            )
        try:
            if self._closed:
                raise RuntimeError("the loader is closed")
            try:
                return next(self._gen)
            except RuntimeError as e:
                # ended meanwhile by a newer iter(), which closed what this
                # epoch took from (a subclass is another error: kept)
                if self.superseded and type(e) is RuntimeError:
                    if str(e) != SUPERSEDED:
                        raise RuntimeError(SUPERSEDED) from e
                raise
        finally:
            self._running.release()

    def close(self) -> bool:
        """End the epoch, dropping its batches in flight; whether it ended
        here. From another thread while one iterates it, only mark it
        closed (False)."""
        self._closed = True
        if self._running.acquire(blocking=False):
            try:
                self._gen.close()
            finally:
                self._running.release()
            return True
        return False
