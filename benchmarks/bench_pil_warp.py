"""timm's geometric ops, one at a time: ringloader's Pillow-exact affine warp
(csrc/augment/pil_warp.c) against Pillow's own, on the same image.

Each of timm's geometric op functions (``timm.data.auto_augment``:
``rotate``, ``shear_x``, ``shear_y``, ``translate_x_rel``,
``translate_y_rel``) at RandAugment's magnitude 9, with bilinear and
bicubic resampling and a fill colour, on a ``--size`` square RGB photo (the
output of the train recipe's crop): timm's function on a PIL image (Pillow's
``Image.transform``, what timm's loader runs) and the same op through
``_core.augment`` (the C op ``timm_op`` on the same bytes, in the calling
thread), one thread each. Prints the median milliseconds an op of
``--rounds`` rounds (the two interleaved, ``--repeat`` calls a round),
their ratio, whether the bytes are identical, and the SIMD level.

Usage::

    python benchmarks/bench_pil_warp.py [--size 224] [--rounds 7]
        [--repeat 100] [--simd c|sse2|avx2]

``--simd`` caps ringloader's SIMD level (as ``RINGLOADER_SIMD``). Not run in
CI: on a shared machine read the ratios, not the milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Callable

import numpy as np

# RandAugment's magnitude-9 arguments and fill: the cases whose bytes
# tests/test_pil_warp.py asserts.
from rlbench.randaugment import FILL
from rlbench.randaugment import M9_WARPS as OPS

FILTERS = {"bilinear": 2, "bicubic": 3}


def _photo(size: int) -> np.ndarray:
    from PIL import Image

    from ringloader.bench.data import load_source

    img = load_source("chelsea").convert("RGB")
    return np.asarray(img.resize((size, size), Image.BICUBIC)).copy()


def _ms_per_call(fn: Callable[[], Any], repeat: int) -> float:
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t) / repeat * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--simd", choices=["c", "sse2", "avx2"], default=None)
    args = ap.parse_args()

    from PIL import Image
    import PIL
    import timm.data.auto_augment as aa

    from ringloader import _core
    from ringloader.adapt import timm_ops

    level = _core.resample_simd(args.simd) if args.simd else _core.resample_simd()
    a = _photo(args.size)
    h, w, _ = a.shape
    rgb = a.tobytes()
    im = Image.fromarray(a)
    print(
        f"{w}x{h} RGB, one thread; ringloader SIMD level {level}, "
        f"Pillow {PIL.__version__}; load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'op':<24} {'filter':<9} {'ours ms':>8} {'Pillow ms':>10} "
        f"{'Pillow/ours':>12}  identical"
    )
    for func, arg in OPS:
        for fname, resample in FILTERS.items():
            ops = [timm_ops.timm_op(func, arg, resample, FILL)]
            fn = getattr(aa, func)

            def ours(ops: list = ops) -> bytes:
                return _core.augment(rgb, h, w, ops, 0, 0, 0)

            def pillow(fn: Any = fn, arg: float = arg, resample: int = resample) -> Any:
                return fn(im, arg, resample=resample, fillcolor=FILL)

            same = np.array_equal(
                np.frombuffer(ours(), np.uint8).reshape(h, w, 3),
                np.asarray(pillow()),
            )
            t_ours, t_pil = [], []
            for _ in range(args.rounds):
                t_ours.append(_ms_per_call(ours, args.repeat))
                t_pil.append(_ms_per_call(pillow, args.repeat))
            o, p = statistics.median(t_ours), statistics.median(t_pil)
            print(
                f"{func + '(' + str(arg) + ')':<24} {fname:<9} {o:8.3f} "
                f"{p:10.3f} {p / o:11.2f}x  {same}"
            )


if __name__ == "__main__":
    main()
