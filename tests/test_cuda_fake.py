"""The GPU path, exercised on any machine through a fake CUDA runtime
(tests/cuda/fake_cudart.c) that the tests build. The fake performs copies
on a background thread after a random delay and checks what a real GPU
would only show as corrupted batches: a pinned slot changed before its copy
ran, a copy into a device buffer that already had one, copies from
unpinned memory or with another device current, leaks. Each scenario runs
in a fresh process, because the runtime is loaded once per process."""

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("cuda") / "fake_cudart.so")
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pthread",
            os.path.join(HERE, "cuda", "fake_cudart.c"),
            "-o",
            out,
        ],
        check=True,
    )
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from images import write_folder

    return write_folder(str(tmp_path_factory.mktemp("gpu_data")), n_per_class=8)


PRELUDE = """
import ctypes, json, os, sys, torch, ringloader
from ringloader import transforms as T
fake = ctypes.CDLL(os.environ["RINGLOADER_CUDART"])
fake.fake_cuda_last_violation.restype = ctypes.c_char_p
def report(**kw):
    kw.update(violations=fake.fake_cuda_violations(),
              last=fake.fake_cuda_last_violation().decode(),
              host=fake.fake_cuda_host_outstanding(),
              dev=fake.fake_cuda_device_outstanding(),
              copies=fake.fake_cuda_copies())
    print("RESULT " + json.dumps(kw))
ds = ringloader.ImageFolder(sys.argv[1])
tf = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip()])
"""


def run(fake, data, body, **env):
    full = dict(
        os.environ, RINGLOADER_CUDART=fake, **{k: str(v) for k, v in env.items()}
    )
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body), data],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
        cwd=HERE,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[7:])


EAGER = """
cpu = [a for a, _ in ringloader.Loader(ds, batch_size=5, transform=tf, seed=1)]
gpu = ringloader.Loader(ds, batch_size=5, transform=tf, seed=1, device="cuda",
                        num_threads=2, prefetch=3)
bad = 0
for (b, _), a in zip(gpu, cpu):
    gpu._gpu.synchronize()       # a consumer kernel runs once its stream is ready
    bad += not torch.equal(a, b.clone())
pinned = gpu.pinned_slots
gpu.close()
del b
report(bad=bad, batches=len(cpu), pinned=pinned)
"""

LAZY = """
cpu = [a for a, _ in ringloader.Loader(ds, batch_size=5, transform=tf, seed=1)]
gpu = ringloader.Loader(ds, batch_size=5, transform=tf, seed=1, device="cuda",
                        num_threads=2, prefetch=3)
got = [b for b, _ in gpu]        # the host never waits during the epoch
gpu._gpu.synchronize()
bad = sum(not torch.equal(a, b) for a, b in zip(cpu, got))
gpu.close()
report(bad=bad)
"""


def test_device_batches_equal_the_cpu_path(fake, data):
    r = run(fake, data, EAGER)
    assert r["bad"] == 0 and r["violations"] == 0, r
    assert r["copies"] == r["batches"]
    assert 1 <= r["pinned"] <= 4  # prefetch + 1 slots, never one per batch
    assert r["host"] == 0 and r["dev"] == 0  # pinned and device memory freed


def test_lazy_consumer_sees_complete_batches(fake, data):
    r = run(fake, data, LAZY, FAKE_CUDA_DELAY_US=50000)
    assert r["bad"] == 0 and r["violations"] == 0, r


def test_a_missing_event_wait_is_caught(fake, data):
    # With the consumer's wait skipped, a consumer that reads when its
    # stream says "ready" sees batches still in flight (the 0xCD poison).
    r = run(fake, data, EAGER, RINGLOADER_CUDA_BREAK="wait", FAKE_CUDA_DELAY_US=20000)
    assert r["bad"] > 0, r


def test_an_early_slot_refill_is_caught(fake, data):
    # With slots recycled without waiting for their copy's event, the fake
    # sees a pinned slot change under a pending copy.
    r = run(
        fake, data, LAZY, RINGLOADER_CUDA_BREAK="recycle", FAKE_CUDA_DELAY_US=100000
    )
    assert r["violations"] > 0 and "modified before its copy" in r["last"], r


def test_no_pinned_or_device_leak_over_1000_batches(fake, data):
    r = run(
        fake,
        data,
        """
    gpu = ringloader.Loader(ds, batch_size=1, transform=T.Resize((16, 16)),
                            device="cuda:0", num_threads=2, prefetch=4)
    n, peak_dev, peak_host = 0, 0, 0
    while n < 1000:
        for b, _ in gpu:
            n += 1
            peak_dev = max(peak_dev, fake.fake_cuda_device_outstanding())
            peak_host = max(peak_host, fake.fake_cuda_host_outstanding())
            if n == 1000:
                break
    del b
    gpu.close()
    report(n=n, peak_dev=peak_dev, peak_host=peak_host)
    """,
        FAKE_CUDA_DELAY_US=200,
    )
    assert r["n"] == 1000 and r["violations"] == 0, r
    assert r["copies"] >= 1000
    assert r["peak_host"] <= 5 and r["peak_dev"] <= 8, r  # bounded, not growing
    assert r["host"] == 0 and r["dev"] == 0, r


def test_normalisation_and_channels_last_on_the_device(fake, data):
    r = run(
        fake,
        data,
        """
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    t = T.Compose([T.Resize(64), T.CenterCrop(48),
                   T.ToDtype(torch.float32, scale=True), T.Normalize(mean, std)])
    cpu = [a for a, _ in ringloader.Loader(ds, batch_size=4, transform=t,
                                           layout="channels_last")]
    gpu = ringloader.Loader(ds, batch_size=4, transform=t, layout="channels_last",
                            device="cuda")
    err, cl = 0.0, True
    for (b, _), a in zip(gpu, cpu):
        gpu._gpu.synchronize()
        err = max(err, (a - b).abs().max().item())
        cl = cl and b.is_contiguous(memory_format=torch.channels_last)
        cl = cl and b.dtype == torch.float32 and b.shape == a.shape
    gpu.close()
    report(err=err, cl=cl)
    """,
    )
    assert r["cl"] and r["err"] < 1e-5 and r["violations"] == 0, r


@pytest.fixture(scope="module")
def data_with_bad_files(tmp_path_factory):
    from images import write_folder

    root = tmp_path_factory.mktemp("gpu_bad")
    write_folder(str(root), n_per_class=5)
    (root / "class_0" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 broken" * 4)
    (root / "class_1" / "empty.jpg").write_bytes(b"")
    return str(root)


def test_skipped_samples_are_replaced_on_the_device(fake, data_with_bad_files):
    # on_error="skip" on the GPU path: the replacement is placed on the host
    # and copied into the device batch; batches and labels equal the CPU
    # path's, with the same replacements.
    r = run(
        fake,
        data_with_bad_files,
        """
    ref = [(a.clone(), l) for a, l in ringloader.Loader(
        ds, batch_size=5, transform=tf, seed=1, on_error="skip")]
    gpu = ringloader.Loader(ds, batch_size=5, transform=tf, seed=1, device="cuda",
                            on_error="skip", num_threads=2, prefetch=3)
    bad = 0
    for (b, lb), (a, la) in zip(gpu, ref):
        gpu._gpu.synchronize()
        bad += not (torch.equal(a, b.clone()) and torch.equal(la, lb))
    skipped = gpu.stats()["skipped"]
    gpu.close()
    report(bad=bad, skipped=skipped, batches=len(ref))
    """,
        FAKE_CUDA_DELAY_US=5000,
    )
    assert r["bad"] == 0 and r["violations"] == 0, r
    assert r["skipped"] == 2 and r["batches"] > 0, r


def test_device_index_is_respected(fake, data):
    # The fake flags a copy issued while another device is current.
    r = run(
        fake,
        data,
        """
    gpu = ringloader.Loader(ds, batch_size=6, transform=tf, device="cuda:1")
    n = sum(1 for _ in gpu)
    gpu.close()
    try:
        ringloader.Loader(ds, batch_size=6, transform=tf, device="cuda:7")
        err = ""
    except RuntimeError as e:
        err = str(e)
    report(n=n, err=err)
    """,
    )
    assert r["n"] > 0 and r["violations"] == 0, r
    assert "device 7" in r["err"], r


def test_the_fake_detects_each_fault(fake):
    """The double itself: each fault it promises to catch is caught."""
    lib = ctypes.CDLL(fake)
    lib.fake_cuda_last_violation.restype = ctypes.c_char_p
    p_void = ctypes.c_void_p
    host, dev, dev2 = p_void(), p_void(), p_void()
    stream, ev = p_void(), p_void()
    assert lib.cudaStreamCreate(ctypes.byref(stream)) == 0
    assert lib.cudaEventCreateWithFlags(ctypes.byref(ev), 2) == 0
    assert lib.cudaHostAlloc(ctypes.byref(host), 4096, 0) == 0
    assert lib.cudaSetDevice(0) == 0
    assert lib.cudaMalloc(ctypes.byref(dev), 4096) == 0
    assert lib.cudaMalloc(ctypes.byref(dev2), 4096) == 0
    base = lib.fake_cuda_violations()

    def copy(dst):
        assert lib.cudaMemcpyAsync(dst, host, 4096, 1, stream) == 0
        assert lib.cudaEventRecord(ev, stream) == 0

    def caught(what):
        assert lib.cudaEventSynchronize(ev) == 0
        assert lib.fake_cuda_violations() > caught.count, what
        assert what in lib.fake_cuda_last_violation().decode()
        caught.count = lib.fake_cuda_violations()

    caught.count = base
    copy(dev)
    assert lib.cudaEventSynchronize(ev) == 0
    assert lib.fake_cuda_violations() == base  # a correct copy is fine
    copy(dev)  # the same device buffer a second time
    caught("two copies")
    ctypes.memset(host, 7, 16)
    copy(dev2)
    ctypes.memset(host, 8, 16)  # refill the slot before the copy ran
    caught("modified before its copy")
    assert lib.cudaSetDevice(1) == 0
    dev3 = p_void()
    assert lib.cudaSetDevice(0) == 0 and lib.cudaMalloc(ctypes.byref(dev3), 4096) == 0
    assert lib.cudaSetDevice(1) == 0
    copy(dev3)  # issued with device 1 current into device 0's memory
    caught("another device")
    assert lib.cudaSetDevice(0) == 0
    outstanding = lib.fake_cuda_host_outstanding()
    assert outstanding >= 1  # the leak counter sees the pinned block
    for d in (dev, dev2, dev3):
        assert lib.cudaFree(d) == 0
    assert lib.cudaFreeHost(host) == 0
    assert lib.fake_cuda_host_outstanding() == outstanding - 1


def test_without_a_runtime_device_cuda_is_one_clear_error(data):
    code = textwrap.dedent("""
    import sys, ringloader
    from ringloader import transforms as T
    ds = ringloader.ImageFolder(sys.argv[1])
    try:
        ringloader.Loader(ds, transform=T.Resize((8, 8)), device="cuda")
    except RuntimeError as e:
        print("ERROR", e)
    """)
    env = dict(os.environ, RINGLOADER_CUDART="/nonexistent/libcudart.so")
    out = subprocess.run(
        [sys.executable, "-c", code, data],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    ).stdout
    assert out.startswith("ERROR device='cuda' needs a CUDA GPU"), out
    assert "/nonexistent/libcudart.so" in out
    assert "leave device unset" in out and out.count("\n") == 1
