"""What the tests and the repository's benchmarks share, kept out of the
installed package (``ringloader.bench`` keeps what ``ringloader bench``
needs: the harness, the data set, the reports and plots).

- ``servers``: nginx, moto's and rclone's S3 servers on 127.0.0.1, the one
  place tests and benchmarks get servers;
- ``peers``: the DALI, SPDL and FFCV contenders of benchmarks/compare.py,
  and the virtual environment they are installed in;
- ``results``: benchmarks/RESULTS.md;
- ``randaugment``: timm's RandAugment arguments at magnitude 9 for its
  geometric ops, which benchmarks/bench_pil_warp.py times and
  tests/test_pil_warp.py checks;
- the benchmark of tar shards over HTTP and S3 (benchmarks/remote):
  ``shards`` writes the data set as WebDataset shards, ``remote`` holds its
  contenders and the S3 server in a process of its own,
  ``remote_results`` its RESULTS.md and plot.

Importable as ``rlbench`` with the checkout's ``benchmarks/`` folder on
``sys.path``: the benchmark scripts run from there, tests/conftest.py puts
it there. Contender modules (``peers``, ``remote``) are registered with
``ringloader.bench.contenders.register``, which makes the harness's child
processes import them too (see _bench.py).
"""
