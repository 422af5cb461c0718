"""The adapters: each library's transform classes, one file a library,
translated into the neutral steps of ``ringloader._steps`` that the
compiler (``ringloader._compiler``) builds the C core's plan from. An
adapter imports ``_steps`` (and ``_core``'s names, ``errors``), never the
compiler; ``transforms.compile_transform`` hands the steps over.
The adapters' helpers read a library's objects for them: its augmentations
as C ops (``torchvision_ops``, ``timm_ops``) and RandomCrop's padding
(``torchvision_pad``).

An adapter module has:

- ``claims(t) -> bool``: t is one of its library's objects (by module: a
  user's own class called Resize may mean something else entirely);
- ``flatten(t) -> list | None``: the transforms of a composition class that
  runs its children in order (a ``Compose``), or None;
- ``describe(t) -> Step``: the step t stands for, or ``Unfused`` with why.

The first adapter in :data:`ADAPTERS` that claims an object describes it.
Adding a library is adding its file here (docs/ARCHITECTURE.md, "Adding a
library's transforms").

An object of no library whose class's ``__call__`` only applies its
``transforms`` attribute (``def __call__(self, img): return
self.transforms(img)``, as torchvision's reference scripts write their
presets) is opened like a composition: :func:`wrapped` checks the method's
code against the same one-line method compiled here, so nothing else can
hide in it.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from types import ModuleType
from typing import Any, Optional

from .._steps import Erase, Step, Unfused
from . import native, timm, torchvision_v1, torchvision_v2

# v2 before v1: v2's modules are under v1's package name.
ADAPTERS: tuple[ModuleType, ...] = (native, torchvision_v2, torchvision_v1, timm)


def adapter_of(t: Any) -> Optional[ModuleType]:
    """The adapter whose library t belongs to, or None."""
    for adapter in ADAPTERS:
        if adapter.claims(t):
            return adapter
    return None


# The wrappers opened: __call__ exactly as one of these (any argument
# names, a docstring allowed). Compiled by this interpreter, so their
# bytecode is the bytecode of the same source in the user's class.
def _image_wrapper(self, img):  # classification presets
    return self.transforms(img)


def _pair_wrapper(self, img, target):  # detection and segmentation presets
    return self.transforms(img, target)


_WRAPPERS = {1: _image_wrapper.__code__, 2: _pair_wrapper.__code__}
# The flags that say what kind of function a code object is (*args,
# **kwargs, generator, coroutine...); a module's __future__ imports set
# others.
_KIND = 0xFFFF


def _consts(code: types.CodeType, doc: Optional[str]) -> list:
    """The constants a method's code uses, less its docstring and None
    (which interpreters keep or leave out for a docstring)."""
    return [c for c in code.co_consts if c is not None and c is not doc]


def _wrapper_code(t: Any) -> tuple[Optional[types.CodeType], str]:
    """(the wrapper's reference code, "") when t's class's ``__call__``
    does nothing but return ``self.transforms(img)`` or
    ``self.transforms(img, target)``; (None, why not) otherwise."""
    name = type(t).__name__
    if adapter_of(t) is not None or not hasattr(t, "transforms"):
        return None, f"{name} is not a torchvision or timm transform"
    # As defined (a staticmethod or partialmethod left unbound, unlike
    # getattr's answer), from the class or the nearest base that has it.
    call = inspect.getattr_static(type(t), "__call__", None)
    if not isinstance(call, types.FunctionType):
        return None, f"{name}.__call__ is not a plain Python function"
    code = call.__code__
    ref = _WRAPPERS.get(code.co_argcount - 1)
    if ref is not None and (
        call.__defaults__
        or call.__kwdefaults__
        or call.__closure__
        or code.co_code != ref.co_code
        or code.co_names != ref.co_names
        or code.co_flags & _KIND != ref.co_flags & _KIND
        or code.co_kwonlyargcount
        or code.co_posonlyargcount
        or _consts(code, call.__doc__) != _consts(ref, None)
    ):
        ref = None
    if ref is None:
        return None, (
            f"{name} is not a torchvision or timm transform, and its __call__ "
            "does more than return self.transforms(img)"
        )
    return ref, ""


def wrapped(t: Any) -> tuple[Optional[Any], str]:
    """(inner, "") when t's class's ``__call__`` does nothing but return
    ``self.transforms(img)`` (inner: t.transforms, which runs on the image
    alone); (None, why not) otherwise. A ``__call__(self, img, target)``
    returning ``self.transforms(img, target)`` is recognised, and refused:
    its transforms move the target with the image (a detection dataset's
    ``transforms`` opens it: :func:`pair_wrapped`)."""
    ref, why = _wrapper_code(t)
    if ref is None:
        return None, why
    if ref is _WRAPPERS[2]:
        return None, (
            f"{type(t).__name__} transforms an (image, target) pair together; "
            "ringloader fuses transforms of the image alone"
        )
    return t.transforms, ""


def pair_wrapped(t: Any) -> Optional[Any]:
    """t.transforms when t's class's ``__call__(self, img, target)`` does
    nothing but return ``self.transforms(img, target)`` (the detection
    reference's presets), else None."""
    return t.transforms if _wrapper_code(t)[0] is _WRAPPERS[2] else None


def flatten(transform: Any) -> list[Any]:
    """The user's transforms in the order they run: compositions of a known
    library (and lists) opened, recursively, and wrappers that only apply
    their ``transforms`` (:func:`wrapped`)."""
    if transform is None:
        return []
    if isinstance(transform, (list, tuple)):
        return [t for item in transform for t in flatten(item)]
    adapter = adapter_of(transform)
    if adapter is not None:
        inner = adapter.flatten(transform)
    else:
        inner = wrapped(transform)[0]
        inner = None if inner is None else [inner]
    if inner is None:
        return [transform]
    return [t for item in inner for t in flatten(item)]


def describe(t: Any) -> Step:
    """The step of one (flattened) user transform."""
    adapter = adapter_of(t)
    if adapter is None:
        return Unfused(type(t).__name__, wrapped(t)[1])
    step = adapter.describe(t)
    unwraps = _unwraps(adapter, t, step)
    if unwraps != step.unwraps:
        step = dataclasses.replace(step, unwraps=unwraps)
    return step


def _unwraps(adapter: ModuleType, t: Any, step: Step) -> str:
    """Whether the step makes a tv_tensors.Image a plain tensor under
    torch: never through torchvision v2's classes and ringloader's own, nor
    through a v1 or timm erase (it writes into the image or a clone of
    it); a v1 or timm step of probability p returns the image itself
    where its draw says no: never for p 0, sometimes for 0 < p < 1. A
    group (RandomApply, RandomChoice, RandomOrder, of either library) as
    its steps and its own draw make it."""
    name = type(t).__name__
    steps = getattr(t, "transforms", None)
    if name in ("RandomApply", "RandomChoice", "RandomOrder") and steps is not None:
        kinds = [describe(s).unwraps for s in flatten(list(steps))]
        if name == "RandomChoice":  # one of them
            return kinds[0] if kinds and len(set(kinds)) == 1 else "sometimes"
        whole = _in_turn(kinds)
        if name == "RandomOrder" or whole == "never":
            return whole
        drawn = _by_p(getattr(t, "p", None))
        return whole if drawn == "always" else drawn
    if adapter not in (torchvision_v1, timm) or isinstance(step, Erase):
        return "never"
    return _by_p(getattr(t, "p", None))


def _in_turn(kinds: list[str]) -> str:
    """Steps run one after another: a plain tensor if any always makes
    one, an Image on some samples if any sometimes does."""
    for kind in ("always", "sometimes"):
        if kind in kinds:
            return kind
    return "never"


def _by_p(p: Any) -> str:
    """A step that acts with probability p (read as the adapters read it,
    float(p)); "always" for a p that is not one."""
    try:
        p = float(p)
    except (TypeError, ValueError):
        return "always"  # no probability: it always acts
    if not p > 0:  # (NaN too: torch.rand(1) < nan never holds)
        return "never"
    return "sometimes" if p < 1 else "always"
