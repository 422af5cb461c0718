"""What "the same bytes as torchvision" means for the colour ops that go
through torch's add with alpha (v2's _blend: contrast, saturation, and
AutoAugment's Color, Contrast, Sharpness; rgb_to_grayscale's weights;
adjust_sharpness's blend), and how the tests check it on every CPU.

torch computes ``x.add_(y, alpha=a)`` as x + a * y in float32, rounded
once (a fused multiply-add) by its AVX2 and AVX512 kernels, and on
aarch64, but twice (the product, then the sum) by its default x86 kernels,
which a CPU without AVX2 runs, or ATEN_CPU_CAPABILITY=default forces.
Truncating to uint8 then moves a value by 1 where the two roundings lie
either side of an integer: rgb_to_grayscale does so on 21 of the 2^24
colours. ringloader's colour kernels round as its SIMD level says (color.c):
fused at AVX2 (and on aarch64), plain at sse2 and c; both pick by the CPU.

So: where ours and torch's round alike (``aligned``, detected by a probe,
not assumed), ours give torchvision's bytes. Where they do not (one of the
two forced), ours give the bytes of torchvision with the add pinned to our
rounding (``pinned_rounding``), and the difference from torchvision as it
runs is that of the two roundings: at most 1 LSB for one op, more where a
chain's later factors amplify it (ColorJitter).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from ringloader import _core

# (20, 152, 7)'s gray: 95.99999 with two roundings, 96 with one (the first
# of the 21 colours where they truncate apart)
PROBE = np.array([[[20, 152, 7]]], np.uint8)
PROBE_GRAY = {False: 95, True: 96}


def torch_fused() -> bool:
    """Whether torch's add with alpha rounds once here (its kernels at this
    ATEN_CPU_CAPABILITY): torchvision's grayscale of the probe colour along
    a row long enough for the vector loop and its tail."""
    from torchvision.transforms.v2 import functional as F

    row = torch.from_numpy(PROBE).permute(2, 0, 1).repeat(1, 1, 67)
    grays = set(F.rgb_to_grayscale(row).flatten().tolist())
    for fused, want in PROBE_GRAY.items():
        if grays == {want}:
            return fused
    raise AssertionError(f"torch's grayscale of the probe is {grays}")


def ours_fused() -> bool:
    """Whether ringloader's colour kernels round torch's add with alpha once,
    at the SIMD level now in force (the probe through grayscale)."""
    out = _core.augment(PROBE.tobytes(), 1, 1, [("grayscale", [1.0])], 0, 0, 0)
    gray = out[0]
    for fused, want in PROBE_GRAY.items():
        if gray == want:
            return fused
    raise AssertionError(f"grayscale of the probe is {gray}, neither rounding's")


def aligned() -> bool:
    """Whether ours and torch's colour kernels round alike now."""
    return ours_fused() == torch_fused()


@contextlib.contextmanager
def pinned_rounding(fused: bool):
    """torch's float32 add with alpha (so torchvision's colour ops) rounded
    fused or plain, whatever torch's kernels do. Fused is the exact product
    in float64 plus one float64 rounding, then float32's, as in color.c: the
    product of a uint8 or float32 and a float32 alpha is exact in float64, the
    sum too unless alpha is tiny against it (1 - ratio under ~2^-20), where a
    float64 result would also have to fall on a float32 half-way point."""
    original = torch.Tensor.add_

    def add_(self, other, *args, alpha=1, **kwargs):
        if alpha == 1 or args or kwargs or self.dtype != torch.float32:
            return original(self, other, *args, alpha=alpha, **kwargs)
        a = torch.tensor(alpha, dtype=torch.float32)  # torch's float alpha
        if fused:
            exact = self.double() + torch.as_tensor(other).double() * a.double()
            return self.copy_(exact)
        return original(self, torch.as_tensor(other) * a)  # rounded, then +

    torch.Tensor.add_ = add_
    try:
        yield
    finally:
        torch.Tensor.add_ = original


def reference():
    """The context for a torchvision reference that must give ours' bytes:
    torchvision as it runs where the roundings agree, else pinned to ours."""
    return contextlib.nullcontext() if aligned() else pinned_rounding(ours_fused())
