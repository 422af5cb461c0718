"""ringloader.DataLoader: torch's DataLoader signature, ringloader inside.

Change ``torch.utils.data.DataLoader(`` to ``ringloader.DataLoader(`` and
keep everything else. When the dataset is an ImageFolder-like folder of files
(torchvision's ``ImageFolder``/``DatasetFolder`` with the default image
loader, or ``ringloader.ImageFolder``), one of ringloader's datasets
(``TarShards``, ``FileList``, ``IndexedImageFolder``, local or over HTTP and
S3), a dataset of the user's that says where its files are
(``ringloader_files()``: :mod:`ringloader.datasets.base`), or a ``Subset``
(``random_split``) or ``ConcatDataset`` of those, nested to any depth, and
its transform starts with transforms ringloader can fuse (a wrapper whose
``__call__`` only returns ``self.transforms(img)``, as torchvision's
reference presets, is opened), batches come from the C pipeline: same
shapes, dtype, layout, value range and labels (``target_transform``
applied). A ``collate_fn`` is called on the samples as DataLoader would
hand them over. Otherwise it says why in one line and returns a plain
``torch.utils.data.DataLoader`` with the same arguments: never a silently
different result.

It is a subclass of ``torch.utils.data.DataLoader`` with its signature and
attributes (``sampler``, ``batch_sampler``, ``collate_fn``...), so that
frameworks that take a DataLoader apart and build it again with a sampler
of theirs (Lightning's DistributedSampler, Accelerate's sharded batch
sampler) build a ringloader.DataLoader: see docs/ARCHITECTURE.md,
"Frameworks".
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any, Optional

import torch
from torch.utils.data import BatchSampler, SequentialSampler
from torch.utils.data import default_collate

from . import _core, _frameworks
from ._sampling import NAMED_ORDERS, BuiltinShuffle, Sampling
from ._plan import NotOnDevice, TransformPlan, plan_views, tail_samples, typed
from .datasets import targets as _targets
from .datasets.base import FILES_PROTOCOL, provides_sources
from .datasets.hf import hf_hint
from .datasets.mds import mds_hint
from .datasets.timmdata import readable
from .datasets.composed import Composed, UnreadableComposition, leaves_of, resolve
from .datasets.detection_batch import NotNative, detection_of, detection_reason
from .datasets.segmentation_batch import segmentation_of, segmentation_reason
from ._gpu import open_gpu
from .errors import FallbackWarning
from .loader import Loader
from ._torch_epoch import torch_epoch
from .transforms import UnsupportedTransform, compile_views


def _fusable_dataset(dataset: Any) -> Optional[str]:
    """None if ringloader can read this dataset itself (or every dataset
    under a Subset or ConcatDataset), else why not."""
    try:
        leaves = leaves_of(dataset)
    except UnreadableComposition as e:
        return str(e)
    for leaf in leaves:
        reason = _fusable_leaf(leaf)
        if reason:
            return reason
    return None


def _fusable_leaf(dataset: Any) -> Optional[str]:
    """None if ringloader can read this dataset of files, else why not."""
    try:
        dataset = readable(dataset)  # timm's ImageDataset: its files
    except (ValueError, AttributeError) as e:
        return f"{type(dataset).__name__}: {e}"
    module = type(dataset).__module__
    # A Hugging Face dataset (HFDataset reads it), Streaming's over MDS
    # shards (MDS reads them).
    hint = hf_hint(dataset) or mds_hint(dataset)
    if hint is not None:
        return hint
    if getattr(dataset, "ringloader_files", None) is not None:
        return None  # a user's dataset that says where its files are
    if module.startswith("ringloader.") and provides_sources(dataset):
        return None  # TarShards, FileList, IndexedImageFolder: local or remote
    if getattr(dataset, "samples", None) is None:
        return (
            f"{type(dataset).__name__} is not an ImageFolder-like dataset of "
            f"files (to be read natively, it can give {FILES_PROTOCOL})"
        )
    if module.startswith("torchvision."):
        from torchvision.datasets import DatasetFolder
        from torchvision.datasets.folder import default_loader, pil_loader

        if not isinstance(dataset, DatasetFolder):
            return f"{type(dataset).__name__} is not a DatasetFolder"
        if type(dataset).__getitem__ is not DatasetFolder.__getitem__:
            return f"{type(dataset).__name__} overrides __getitem__"
        if getattr(dataset, "loader", None) not in (default_loader, pil_loader):
            return "the dataset uses a custom image loader"
    elif not module.startswith("ringloader."):
        return (
            f"{type(dataset).__name__} is a custom dataset (to be read "
            f"natively, it can give {FILES_PROTOCOL})"
        )
    return None


def _why_not(dataset: Any, kwargs: dict) -> Optional[str]:
    reason = (
        _fusable_dataset(dataset)
        or detection_reason(leaves_of(dataset), kwargs)
        or segmentation_reason(leaves_of(dataset), kwargs)
    )
    if reason:
        return reason
    if kwargs.get("worker_init_fn") is not None:
        return "worker_init_fn is set"
    if kwargs.get("batch_size", 1) is None:
        return "batch_size=None (unbatched loading)"
    try:
        transform = getattr(resolve(dataset), "transform", None)
    except UnreadableComposition as e:
        return str(e)
    return _transform_reason(transform, kwargs.get("collate_fn"))


def _transform_reason(transform: Any, collate_fn: Any) -> Optional[str]:
    """Why the images ``transform`` makes are not what torch's DataLoader
    would hand over or collate (with ``collate_fn``), or None; asked when
    the loader is made, and again for a transform replaced since."""
    try:
        compiled = compile_views(transform, varying=True)
    except UnsupportedTransform as e:
        return _first_reason(transform) or str(e)
    custom = _custom_collate(collate_fn)
    # DataLoader would hand a collate_fn PIL images; ringloader makes
    # tensors of them.
    end = "end the transform with PILToTensor() or ToTensor() (v2: ToImage())"
    pil = not all(c.tensor_out or c.rest for c in compiled)
    passed = [n for c in compiled if not (c.tensor_out or c.rest) for n in c.passed]
    if passed:
        # torch's DataLoader gives PIL images here, which its default
        # collate refuses: what the user meant is a tensor.
        names = ", ".join(dict.fromkeys(passed))
        return (
            f"the transform ends in a PIL image: {names} left the PIL image as "
            "it was (v2's ToDtype, ConvertImageDtype and ToPureTensor act on "
            "tensors): put ToImage() before them"
        )
    mixed = next((c.mixed for c in compiled if c.mixed and (custom or c.rest)), None)
    if mixed:
        return (
            f"after {mixed} (torchvision v1's or timm's, random) torch's "
            "images are tv_tensors.Image on the samples it leaves and plain "
            "tensors on the others, which the collate_fn or the steps after "
            "it would see: use v2's class, or ToImage() after it"
        )
    if not custom and any(c.spec.get("varying") for c in compiled):
        # default_collate stacks the images (or fails on two sizes).
        what = "PIL images" if pil else "images"
        advice = f"{end} and pass a collate_fn" if pil else "pass a collate_fn"
        return (
            f"the transform gives {what} of varying sizes (no crop) and no "
            f"collate_fn is set ({advice}, e.g. lambda b: tuple(zip(*b)), "
            "for ringloader to load them)"
        )
    if custom and pil:
        return (
            f"collate_fn is set and the transform ends in a PIL image ({end} "
            "for ringloader to call the collate_fn)"
        )
    return None


def _custom_collate(collate_fn: Any) -> bool:
    """Whether collate_fn is the user's own: default_collate, given or not,
    is the batch the loader makes anyway."""
    return collate_fn is not None and collate_fn is not default_collate


def _first_reason(transform: Any) -> Optional[str]:
    """Why the transform's first step is not fused, where it is not one of
    a known library's (a user's own class, say): a truer
    reason than that nothing gives a fixed size."""
    from . import adapt

    try:
        items = adapt.flatten(transform)
    except Exception:
        return None
    if items and adapt.adapter_of(items[0]) is None:
        return adapt.wrapped(items[0])[1]
    return None


def _pinning(asked: bool) -> tuple[bool, Optional[str]]:
    """(pin, warning) for ``pin_memory=asked``, decided as DataLoader
    decides: pin when an accelerator is available (not MPS, where torch
    cannot pin), else say why not.

    Pinning copies each batch into page-locked memory from torch's caching
    host allocator, as DataLoader's pin thread does: the C core's host slots
    are ordinary page-aligned memory, and pinning them in place
    (``cudaHostRegister``) would tie each slot's lifetime to CUDA."""
    if not asked:
        return False, None
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:  # torch < 2.6
        available = torch.cuda.is_available()
        kind = "cuda" if available else None
    else:
        available = accelerator.is_available()
        current = accelerator.current_accelerator() if available else None
        kind = current.type if current is not None else None
    if not available:
        return False, (
            "'pin_memory' argument is set as true but no accelerator is found, "
            "then device pinned memory won't be used."
        )
    if kind == "mps":
        return False, (
            "'pin_memory' argument is set as true but not supported on MPS now, "
            "device pinned memory won't be used."
        )
    return True, None


# torch's own class, bound at import: a script may replace the name
# torch.utils.data.DataLoader with ringloader.DataLoader, and the fallback
# must still reach torch's (else it would call itself).
TorchDataLoader = _frameworks.TorchDataLoader


# Loader's own options, which torch's DataLoader has no argument for: the
# keyword-only arguments of ringloader.DataLoader, with their defaults.
OPTIONS: dict[str, Any] = {
    "seed": None,  # None: the generator's initial seed, else torch's
    "layout": "NCHW",
    "io": "auto",
    "max_pixels": _core.DEFAULT_MAX_PIXELS,
    "allow_truncated": False,
    "direct_io": False,
    "on_error": "raise",
    "max_consecutive_errors": 16,
    "arena_bytes": None,
    "device": None,
    "distributed": None,
    "rank": None,
    "world_size": None,
}


def _reshaping(options: dict) -> list[str]:
    """The options given that make a batch other than what torch's
    DataLoader makes (its place, layout or share of the data): a fallback to
    torch's cannot honour them silently."""
    out = []
    if options.get("layout", "NCHW") != "NCHW":
        out.append(f"layout={options['layout']!r}")
    device = options.get("device")
    if device is not None and torch.device(device).type != "cpu":
        out.append(f"device={str(device)!r}")
    for name in ("distributed", "rank", "world_size"):
        if options.get(name) is not None:
            out.append(f"{name}={options[name]!r}")
    return out


class _Argument:
    """An attribute the Loader resolves (``rank`` from torch.distributed),
    where the instance's ``__dict__`` keeps the argument as given under the
    same name: what ``vars(loader)`` shows, so that a framework rebuilding
    the loader from its attributes (Lightning) passes back what the user
    passed, not what it resolved to."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = "_resolved_" + name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else obj.__dict__[self.key]

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.key] = value


class _LoaderType(type):
    """The metaclass of ringloader.DataLoader. Where a script replaced
    ``torch.utils.data.DataLoader`` with ringloader.DataLoader, what that
    name builds (a torch DataLoader, when ringloader falls back) stays an
    instance of that name, as code that checks ``isinstance(x,
    torch.utils.data.DataLoader)`` (Accelerate's prepare) expects."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if super().__instancecheck__(obj):
            return True
        return torch.utils.data.DataLoader is cls and isinstance(obj, TorchDataLoader)


class DataLoader(Loader, TorchDataLoader, metaclass=_LoaderType):
    """Same arguments as ``torch.utils.data.DataLoader``.

    ``num_workers`` becomes the number of decode threads (at least 1);
    ``prefetch_factor`` times that is the number of batches decoded ahead
    (at most 8 unless ``prefetch_factor`` asks for more); ``generator``
    seeds the shuffle order (default: torch's initial seed, so
    ``torch.manual_seed`` makes runs repeatable). ``pin_memory=True``
    copies each batch (images and labels) into page-locked memory, as
    DataLoader's pin thread does, when an accelerator is available; without
    one it warns once (a ``UserWarning``, as DataLoader does) and does not
    pin. ``collate_fn=default_collate`` is the default: the batch is the
    one the C pipeline made. Another ``collate_fn`` is called on each
    batch's samples as DataLoader hands them over (``(image, target)`` as
    indexing the dataset gives them, the images views of that batch) and
    its result is the batch.
    ``timeout``, ``multiprocessing_context``, ``persistent_workers`` and
    ``in_order`` have nothing to do in a thread pipeline and are accepted.

    As torch's, ``sampler`` and ``batch_sampler`` are set when not given (a
    RandomSampler-like view of the built-in shuffle, or a SequentialSampler,
    and a BatchSampler over it): frameworks read them. The loader keeps its
    own order for these (keyed by seed and epoch); a sampler passed in is
    used as given. Where ``torch.distributed`` is initialised with several
    processes and no sampler is passed, iterating raises ValueError saying
    what to pass, rather than every rank reading the whole data set.

    ``ringloader.Loader``'s own options are keyword-only arguments:
    ``seed`` (default: the generator's initial seed, else torch's),
    ``layout``, ``io``, ``max_pixels``, ``allow_truncated``, ``direct_io``,
    ``on_error``, ``max_consecutive_errors``, ``arena_bytes``, ``device``,
    ``distributed``,
    ``rank``, ``world_size``, as ``Loader`` takes them. Frameworks that
    rebuild the loader keep them.
    """

    def __new__(cls, dataset: Any = None, *args: Any, **kwargs: Any):
        names = [
            "batch_size",
            "shuffle",
            "sampler",
            "batch_sampler",
            "num_workers",
            "collate_fn",
            "pin_memory",
            "drop_last",
            "timeout",
            "worker_init_fn",
            "multiprocessing_context",
            "generator",
        ]
        merged = dict(zip(names, args))
        merged.update(kwargs)
        reason = _why_not(dataset, merged)
        if reason is not None:
            options = {k: kwargs.pop(k) for k in OPTIONS if k in kwargs}
            reshaping = _reshaping(options)
            if reshaping:
                raise ValueError(
                    f"ringloader cannot read this dataset itself ({reason}), and "
                    f"torch.utils.data.DataLoader has no {', '.join(reshaping)}"
                )
            named = merged.get("shuffle")
            named = named if named in NAMED_ORDERS else None
            warnings.warn(
                f"ringloader: using torch.utils.data.DataLoader because {reason}"
                + (f'; shuffle="{named}" is plain shuffling there' if named else "")
                + (
                    f"; {', '.join(options)} apply to ringloader's pipeline only"
                    if options
                    else ""
                ),
                FallbackWarning,
                stacklevel=2,
            )
            if named and "shuffle" in kwargs:
                kwargs["shuffle"] = True
            elif named:
                args = args[:1] + (True,) + args[2:]
            return TorchDataLoader(dataset, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        dataset: Any,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool | str] = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Any = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        multiprocessing_context: Any = None,
        generator: Optional[torch.Generator] = None,
        *,
        prefetch_factor: Optional[int] = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        seed: Optional[int] = None,
        layout: str = "NCHW",
        io: str = "auto",
        max_pixels: int = _core.DEFAULT_MAX_PIXELS,
        allow_truncated: bool = False,
        direct_io: bool = False,
        on_error: str = "raise",
        max_consecutive_errors: int = 16,
        arena_bytes: Optional[int] = None,
        device: Any = None,
        distributed: Optional[bool] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
    ) -> None:
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor is only allowed with num_workers > 0 (as in "
                "torch's DataLoader); set num_workers (ringloader's decode "
                "threads) or leave prefetch_factor at None"
            )
        threads = max(1, int(num_workers))
        prefetch = (prefetch_factor or 2) * threads
        if prefetch_factor is None:
            prefetch = min(prefetch, 8)
        if seed is None:
            seed = (
                generator.initial_seed()
                if generator is not None
                else torch.initial_seed()
            )
        super().__init__(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle if shuffle in NAMED_ORDERS else bool(shuffle),
            sampler=sampler,
            batch_sampler=batch_sampler,
            drop_last=drop_last,
            num_threads=threads,
            prefetch=max(1, prefetch),
            seed=seed,
            layout=layout,
            io=io,
            max_pixels=max_pixels,
            allow_truncated=allow_truncated,
            direct_io=direct_io,
            on_error=on_error,
            max_consecutive_errors=max_consecutive_errors,
            arena_bytes=arena_bytes,
            device=device,
            distributed=distributed,
            rank=rank,
            world_size=world_size,
        )
        # The arguments as given, beside what the Loader resolved (_Argument).
        self.__dict__.update(distributed=distributed, rank=rank, world_size=world_size)
        # DataLoader's attributes, for code that reads them (frameworks
        # that rebuild a loader from its arguments and attributes).
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.collate_fn = collate_fn if collate_fn is not None else default_collate
        self._collate = collate_fn if _custom_collate(collate_fn) else None
        if self._collate is None and segmentation_of(self._data) is not None:
            # (image, mask) items: default_collate's [images, masks].
            self._collate = default_collate
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context  # torch checks it
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.pin_memory_device = pin_memory_device
        self.in_order = in_order
        self._pin_memory, self._pin_warning = _pinning(
            bool(pin_memory) and self.device.type == "cpu"
        )
        # sampler and batch_sampler as torch's DataLoader sets them; those
        # made here stand for the built-in order (see _sampling).
        if sampler is None:
            if self.shuffle:
                kind = "runs" if self.runs else "stream" if self.stream else None
                sampler = BuiltinShuffle(dataset, self.seed, kind, generator)
            else:
                sampler = SequentialSampler(dataset)
            self._own_sampler = sampler
        if batch_sampler is None and self.batch_size is not None:
            batch_sampler = BatchSampler(sampler, self.batch_size, drop_last)
            self._own_batch_sampler = batch_sampler
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._checked = self.transform
        # As torch's: batch_size, sampler, dataset... cannot change now.
        self._DataLoader__initialized = True
        _frameworks.remember(self)

    _own_sampler: Any = None
    _own_batch_sampler: Any = None
    # Why the dataset's transforms, replaced since the loader was made, are
    # not run natively: this epoch is then torch's DataLoader's. _check:
    # that of the transform _checked (the one the loader was made with
    # passed the front door).
    _replaced: Optional[str] = None
    _checked: Any = None
    _check: Optional[str] = None
    distributed = _Argument()
    rank = _Argument()
    world_size = _Argument()

    def options(self) -> dict:
        """The keyword-only options as this loader was given them (seed: the
        one it uses): what a loader rebuilt over the same dataset takes to
        read it the same way (Accelerate's, _frameworks.py)."""
        return {name: vars(self)[name] for name in OPTIONS}

    def _finish(self, raw: torch.Tensor, plan: TransformPlan) -> Any:
        # For a collate_fn, a Python tail's results are kept per sample, as
        # the tail gives them (not batched by default_collate first).
        if self._collate is not None and plan.tail:
            return tail_samples(raw, plan)
        return super()._finish(raw, plan)

    def _follow(self, depth: int = 0) -> None:
        # The dataset's transform, read again as the Loader reads it; one it
        # does not compile, or whose images torch's DataLoader would not
        # hand over as the pipeline makes them, makes this epoch torch's.
        try:
            super()._follow(depth=2)  # (this frame and __iter__'s)
        except (
            NotNative,
            UnreadableComposition,
            UnsupportedTransform,
            NotOnDevice,
        ) as e:
            self._replaced = _first_reason(self._raw_transform()) or str(e)
            return
        if self.transform is not self._checked:
            self._checked = self.transform
            self._check = _transform_reason(self.transform, self.collate_fn)
        self._replaced = self._check

    def _raw_transform(self) -> Any:
        """The transform the dataset holds now, where it is one object."""
        try:
            return getattr(resolve(self.dataset), "transform", None)
        except (NotNative, UnreadableComposition, UnsupportedTransform):
            return None

    def _iterate(self, epoch: int, tag: int) -> Any:
        if self._replaced is None:
            return super()._iterate(epoch, tag)
        return self._torch_epoch(epoch, tag, self._replaced)

    def _torch_epoch(self, epoch: int, tag: int, why: str) -> Any:
        """The epoch as torch's DataLoader reads it (``_torch_epoch``): the
        loader's batches of indices, collate_fn, workers and device. The
        pipeline is closed meanwhile (its threads and buffers; the next
        native epoch makes a new one)."""
        with self._locked():  # as Loader._iterate's
            self._latest(tag)
            self._drop_pipeline()
            self._meter.start_epoch()
        # The dataset's own length: its samples may have been replaced with
        # the transforms, which the sources were not read again for.
        sampling = dataclasses.replace(self._sampling(), n=len(self.dataset))

        def begin() -> Any:
            with self._locked():
                self._latest(tag)
                return self._position.begin(sampling, epoch, skip=False)[0]

        options = dict(
            collate_fn=self.collate_fn,
            num_workers=self.num_workers,
            pin_memory=self._pin_memory,
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            generator=self.generator,
            prefetch_factor=self.prefetch_factor,
            in_order=self.in_order,
        )
        place = self._gpu.place if self._gpu is not None else None
        t0 = time.perf_counter()
        # stacklevel: the user's loop, past EpochIterator and this generator
        for n, out in torch_epoch(self.dataset, begin, why, options, place, 4):
            self._counted(tag, n, time.perf_counter() - t0)
            yield out
            t0 = time.perf_counter()
        self._ended(tag)

    def _collated(self, src: Any, views: list, taken: Any) -> Any:
        """The user's collate_fn on the batch's samples as DataLoader would
        hand them over, each what indexing the dataset gives: (image,
        target), the image a view of the batch (a list of views for a
        MultiView), the target as the dataset gives it (an int for a class),
        target_transform applied; for a shard's fields, the tuple of the
        sample's fields (without field_transforms, which take a batch), or
        what the field table's ``item`` makes of them (an HFDataset's
        dicts)."""
        n = len(taken.idx)
        data = self._data
        det = detection_of(data.leaves if isinstance(data, Composed) else [data])
        spec = self._plans[0].compiled.spec
        if det is not None:  # a wrapped CocoDetection: (image, target) items
            rows = data.leaf_index(taken.idx) if isinstance(data, Composed) else None
            items = det.batch(
                src, views[0], taken, spec, self.seed, self.on_error, rows
            )
            if self._gpu is not None:  # the images are there already
                items = [(item[0], *map(self._gpu.place, item[1:])) for item in items]
            return self._collate(items)
        seg = segmentation_of(self._data)
        if seg is not None:  # a wrapped VOCSegmentation: (image, mask) items
            skip = self.on_error == "skip"
            place = self._gpu.place if self._gpu is not None else None
            return seg.collated(
                self._collate, src, views[0], taken, spec, self.seed, skip, place
            )
        images = [
            [self._item(v, k, j) for j, v in enumerate(views)]
            if self._multi
            else self._item(views[0], k, 0)
            for k in range(n)
        ]
        fields = getattr(src, "fields", None)
        if fields is not None:
            describe = getattr(self._data, "describe", None) or str
            item = getattr(fields, "item", tuple)
            items = [
                item(
                    images[k] if f == fields.image else fields.value(f, i, x, describe)
                    for f in range(len(fields.names))
                )
                for k, (i, x) in enumerate(zip(taken.idx, taken.fields))
            ]
        else:
            tt = self.target_transform
            items = []
            for k, i in enumerate(taken.idx):
                target = _targets.item(src.targets, int(i))
                items.append((images[k], tt(target) if tt is not None else target))
        return self._collate(items)

    def _item(self, view: Any, k: int, j: int) -> Any:
        """Sample k of view j as indexing the dataset gives it: a Python
        tail's result as it is, a fused image of the type torch's steps
        make (a tv_tensors.Image after v2's ToImage)."""
        plan = self._plans[j]
        return view[k] if plan.tail else typed(view[k], plan.compiled)

    @property  # type: ignore[override]
    def batch_sampler(self) -> Any:
        # Read by Accelerate's prepare() before it builds the loader it
        # hands back: the moment to make that one a ringloader.DataLoader
        # too, if Accelerate was imported after this loader was made.
        _frameworks.hook_accelerate()
        return self.__dict__.get("_batch_sampler")

    @batch_sampler.setter
    def batch_sampler(self, value: Any) -> None:
        self.__dict__["_batch_sampler"] = value

    def _sampling(self) -> Sampling:
        """The samplers made in __init__ are the built-in order: the
        loader draws it itself (and shards it with distributed=...)."""
        s = super()._sampling()
        sampler = None if s.sampler is self._own_sampler else s.sampler
        batches = (
            None if s.batch_sampler is self._own_batch_sampler else s.batch_sampler
        )
        if batches is not None:
            sampler = None  # a batch sampler of the user's draws every index
        return dataclasses.replace(s, sampler=sampler, batch_sampler=batches)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        if isinstance(self._own_sampler, BuiltinShuffle):
            self._own_sampler.set_epoch(epoch)

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if isinstance(self._own_sampler, BuiltinShuffle):
            self._own_sampler.seed = self.seed

    def _place_on(self, device: Any) -> bool:
        """Copy batches to ``device`` from now on, as ``Loader(device=...)``
        does (pinned slots, the loader's own copy stream, conversion on the
        GPU): how Accelerate's device placement is done for a
        ringloader.DataLoader (_frameworks.py), so that its
        ``send_to_device`` finds the batches already there. Returns whether
        the batches now go to ``device``: host devices are left to the
        caller, and so are images of varying sizes (the loader yields lists
        of host tensors, which ``send_to_device`` moves). The new plans are
        compiled first: on an error (ValueError: a step that cannot follow
        the copy) the loader is left as it was."""
        device = torch.device(device)
        if device.type != "cuda":
            return False
        if device == self.device:
            return True
        if self.device.type == "cuda":
            raise ValueError(
                f"this loader already copies its batches to {self.device}, "
                f"not {device}: make one loader per device"
            )
        if any(plan.compiled.spec.get("varying") for plan in self._plans):
            return False
        plans = plan_views(self.transform, self.layout, True, stacklevel=3)
        gpu = open_gpu(device)
        self.close()
        self.device, self._gpu = device, gpu
        self._use_transform(self.transform, 0, plans)
        self._pin_memory, self._pin_warning = False, None
        return True

    def __iter__(self):
        if self._pin_warning is not None:
            # Said at the first iteration, where DataLoader says it.
            warnings.warn(self._pin_warning, UserWarning, stacklevel=2)
            self._pin_warning = None
        # torch's DataLoader draws its workers' base seed from the generator
        # (torch's default one without) at each iteration; a sampler sharing
        # the generator (torch's RandomSampler made for shuffle=True, as
        # frameworks hand back) then draws the same order as under torch's,
        # and a collate_fn drawing from torch's generator (MixUp, CutMix)
        # the same mixes.
        it = super().__iter__()
        if self._replaced is None:  # (else torch's own iterator draws it)
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        return it


_frameworks.DataLoader = DataLoader
