"""Where a Loader stands in its epochs: the epoch the next iteration runs,
the batches of it already yielded, the samplers' epoch and state, and the
state_dict that lets a new process resume exactly there."""

from __future__ import annotations

from typing import Any, Iterator, Optional

from ._keys import Keys
from ._sampling import Sampling

STATE_VERSION = 1


class Position:
    """Where a loader stands: the epoch the next iteration runs, how many
    batches of the current one were yielded, and what resuming needs."""

    def __init__(self) -> None:
        self.epoch = 0
        self.explicit = False  # set_epoch or load_state_dict chose the epoch
        self.started = 0  # iterations started
        self.yielded = 0  # batches yielded in the current epoch
        self.finished = False
        self.skip = 0  # batches to skip at the next iteration
        self.sampler_states: dict = {}  # stateful samplers at epoch start
        self.begun = False  # whether begin() ran for the current iteration
        # The samplers' epoch (Sampling.sampler_epoch) at the start of the
        # current epoch: what resuming gives them back.
        self.sampler_epoch: Optional[int] = None

    def set_epoch(self, epoch: int, sampling: Sampling) -> None:
        """Run ``epoch`` at the next iteration (also forwarded to a sampler
        that has ``set_epoch``)."""
        if epoch != self.epoch:
            self.skip = 0  # a restored position belongs to its own epoch
        self.epoch = epoch
        self.explicit = True
        self.yielded = self.skip
        self.finished = False
        self._forward(sampling, epoch)

    def _forward(self, sampling: Sampling, epoch: int) -> None:
        for s in sampling.epoch_samplers():
            if hasattr(s, "set_epoch"):
                s.set_epoch(epoch)
        self.sampler_epoch = sampling.sampler_epoch()

    def next_iteration(self) -> int:
        """The epoch a new iteration runs: the one chosen, else the one
        after the last."""
        if self.started > 0 and not self.explicit:
            self.epoch += 1
            self.skip = 0
        self.yielded = self.skip
        self.finished = False
        self.explicit = False
        self.started += 1
        # Until this epoch begins, the samplers are as it will find them.
        self.sampler_states = {}
        self.begun = False
        return self.epoch

    def begin(
        self, sampling: Sampling, epoch: int, skip: bool
    ) -> tuple[Iterator[Any], Keys]:
        """The batches of ``epoch`` still to yield and the keys drawn so
        far (``skip``: on_error="skip", see Keys). A built-in order starts
        at the batch to resume at; a stateful sampler is saved as it is
        now, before this epoch draws from it (and prefetching draws ahead of what is yielded):
        resuming restores this and replays the batches yielded before."""
        self.sampler_states = {
            name: s.state_dict()
            for name, s in sampling.user_samplers
            if s is not None and hasattr(s, "state_dict")
        }
        self.sampler_epoch = sampling.sampler_epoch()
        self.begun = True
        done, self.skip = self.skip, 0  # batches yielded before
        if sampling.is_builtin:  # resuming: start at the next batch
            batches = sampling.batches(epoch, start=done)
            keys = sampling.keys(epoch, skip, batches)
        else:  # resuming: replay the batches yielded before
            batches = sampling.batches(epoch)
            keys = sampling.keys(epoch, skip, batches)
            for _ in range(done):
                idx = next(batches, None)
                if idx is None:
                    break
                keys.draw([int(i) for i in idx])
        self.yielded = done
        self.finished = False
        return batches, keys

    def state_dict(self, sampling: Sampling) -> dict:
        state = {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "batches_yielded": self.yielded,
            "epoch_finished": self.finished,
            "seed": sampling.seed,
            "world_size": sampling.world_size,
            "rank": sampling.rank,
        }
        # The samplers' epoch as this epoch began, or (not begun yet) as
        # it will begin.
        at = self.sampler_epoch if self.begun else sampling.sampler_epoch()
        if at is not None:
            state["sampler_epoch"] = at
        for name, s in sampling.user_samplers:
            if s is not None and hasattr(s, "state_dict"):
                # As it was when this epoch started (see begin).
                state[name] = self.sampler_states.get(name, s.state_dict())
        return state

    @staticmethod
    def check(state: dict, sampling: Sampling) -> None:
        """Raise ValueError for a state this loader cannot continue."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown ringloader state version {state.get('version')}")
        if sampling.distributed and state.get("world_size", 1) != sampling.world_size:
            raise ValueError(
                f"this state was taken with world_size={state.get('world_size')}, "
                f"this loader has world_size={sampling.world_size}: the shards "
                "differ, so the position cannot be restored"
            )

    def restore(self, state: dict, sampling: Sampling) -> None:
        """Continue where ``state`` was taken at the next iteration."""
        epoch, done = int(state["epoch"]), int(state["batches_yielded"])
        # The samplers' epoch when the state was taken: the loader's unless
        # the sampler's alone was set (Sampling.draw_epoch).
        at = int(state.get("sampler_epoch", epoch))
        if state.get("epoch_finished") or done >= sampling.batches_per_epoch():
            epoch, at, done = epoch + 1, at + 1, 0
        self.epoch, self.skip = epoch, done
        # state_dict() before the next batch says the same position
        self.yielded, self.finished = done, False
        self.explicit = True
        self.started = max(self.started, 1)
        self._forward(sampling, at)
        for name, s in sampling.user_samplers:
            if name in state and hasattr(s, "load_state_dict"):
                s.load_state_dict(state[name])
        self.sampler_states = {}
