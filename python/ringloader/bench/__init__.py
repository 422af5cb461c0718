"""ringloader's one benchmark harness and one data set, shared by
``ringloader bench``, ``make demo`` (benchmarks/bench_eval.py) and the
scripts in benchmarks/.

- ``data``: the ImageNet-like JPEG folder every benchmark runs on;
- ``base``: the train/eval pipelines, contender names, the interface;
  ``contenders``: DataLoader, ringloader, the decode-only bound, the
  registry (which benchmarks/rlbench extends with DALI, SPDL, FFCV and the
  contenders of tar shards over HTTP and S3);
- ``harness``: runs contenders round-robin over rounds, in pinned child
  processes or in this one, and measures them; ``system``: CPU time and
  memory of process trees, the machine;
- ``report`` and ``plots``: tables and plots (matplotlib, optional).

What only the tests and the repository's benchmarks use (the nginx, moto
and rclone launchers, the peers and their venv, the remote benchmark,
benchmarks/RESULTS.md) is not installed: it is the checkout's
benchmarks/rlbench.

``import ringloader`` does not import this package, and this package
imports torch, torchvision, Pillow and ringloader itself only when a
benchmark runs: its child processes load it by path to measure another
build of ringloader (see harness.py).
"""
