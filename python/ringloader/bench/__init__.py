"""ringloader's one benchmark harness and one data set, shared by
``ringloader bench``, ``make demo`` (benchmarks/bench_eval.py) and the
scripts in benchmarks/.

- ``data``: the ImageNet-like JPEG folder every benchmark runs on;
- ``base``: the train/eval pipelines, contender names, the interface;
  ``contenders``: DataLoader, ringloader, the decode-only bound, the
  registry; ``peers``: DALI, SPDL and FFCV, and the venv they need;
- ``harness``: runs contenders round-robin over rounds, in pinned child
  processes or in this one, and measures them; ``system``: CPU time and
  memory of process trees, the machine;
- ``report``, ``results`` and ``plots``: tables, benchmarks/RESULTS.md and
  plots (matplotlib, optional);
- the benchmark of tar shards over HTTP and S3 (benchmarks/remote):
  ``shards`` writes the data set as WebDataset shards, ``servers`` starts
  nginx and moto on 127.0.0.1, ``remote`` holds its contenders (ringloader
  on local, HTTP and S3 shards; WebDataset over fsspec and s3fs;
  s3torchconnector), ``remote_results`` its RESULTS.md and plot.

``import ringloader`` does not import this package, and this package
imports torch, torchvision, Pillow and ringloader itself only when a
benchmark runs: its child processes load it by path to measure another
build of ringloader (see harness.py).
"""
