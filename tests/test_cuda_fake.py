"""The GPU path, exercised on any machine through a fake CUDA runtime
(tests/cuda/fake_cudart.c) that the tests build. The fake performs copies
on a background thread after a random delay and checks what a real GPU
would only show as corrupted batches: a pinned slot changed before its copy
ran, a copy into device memory that already had one, copies from
unpinned memory (unless allowed; then a pageable source freed or reused
before its copy ran) or with another device current, leaks. Each scenario runs
in a fresh process, because the runtime is loaded once per process."""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "cuda"))
import fake_gpu  # noqa: E402  (tests/cuda: the fake runtime and its GPU double)


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return fake_gpu.build(str(tmp_path_factory.mktemp("cuda") / "fake_cudart.so"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from images import write_folder

    return write_folder(str(tmp_path_factory.mktemp("gpu_data")), n_per_class=8)


PRELUDE = """
import ctypes, json, os, sys, threading, torch, ringloader
from ringloader import transforms as T
sys.path.insert(0, "cuda")
import fake_gpu
fake_gpu.install()
from fake_gpu import report
fake = ctypes.CDLL(os.environ["RINGLOADER_CUDART"])
ds = ringloader.ImageFolder(sys.argv[1])
tf = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip()])
"""


def run(fake, data, body, **env):
    return fake_gpu.run_script(fake, PRELUDE + textwrap.dedent(body), [data], **env)


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
    # Copies take 0.2 s each: a consumer slowed down by other processes
    # (20 ms was not always enough in CI) still reads before they end.
    r = run(fake, data, EAGER, RINGLOADER_CUDA_BREAK="wait", FAKE_CUDA_DELAY_US=200000)
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


def test_the_fake_detects_each_fault(fake, monkeypatch):
    """The double itself: each fault it promises to catch is caught."""
    lib = ctypes.CDLL(fake)
    lib.fake_cuda_last_violation.restype = ctypes.c_char_p
    p_void = ctypes.c_void_p
    host, dev, dev2 = p_void(), p_void(), p_void()
    stream, ev = p_void(), p_void()
    assert lib.cudaStreamCreateWithFlags(ctypes.byref(stream), 1) == 0
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
    blocking_stream, dev4 = p_void(), p_void()
    assert lib.cudaStreamCreate(ctypes.byref(blocking_stream)) == 0
    assert lib.cudaMalloc(ctypes.byref(dev4), 4096) == 0
    assert lib.cudaMemcpyAsync(dev4, host, 4096, 1, blocking_stream) == 0
    caught("not created cudaStreamNonBlocking")
    assert lib.cudaStreamDestroy(blocking_stream) == 0
    lib.fake_cuda_lock_note(1)  # as ringloader's core does holding its lock
    assert lib.cudaEventSynchronize(ev) == 0
    caught("cudaEventSynchronize while the pipeline's lock is held")
    lib.fake_cuda_lock_note(-1)
    # Memory pinned with device 1 current, copied with device 0 current.
    host1, dev5 = p_void(), p_void()
    assert lib.cudaSetDevice(1) == 0
    assert lib.cudaHostAlloc(ctypes.byref(host1), 4096, 0) == 0
    assert lib.cudaSetDevice(0) == 0
    assert lib.cudaMalloc(ctypes.byref(dev5), 4096) == 0
    assert lib.cudaMemcpyAsync(dev5, host1, 4096, 1, stream) == 0
    assert lib.cudaEventRecord(ev, stream) == 0
    caught("pinned with another device current")
    assert lib.cudaFreeHost(host1) == 0
    # Copies into disjoint parts of one buffer are fine; an overlap is not.
    dev6 = p_void()
    assert lib.cudaMalloc(ctypes.byref(dev6), 8192) == 0
    for at, n in ((0, 4096), (4096, 4096)):
        assert lib.cudaMemcpyAsync(p_void(dev6.value + at), host, n, 1, stream) == 0
    assert lib.cudaEventRecord(ev, stream) == 0
    assert lib.cudaEventSynchronize(ev) == 0
    assert lib.fake_cuda_violations() == caught.count
    assert lib.cudaMemcpyAsync(p_void(dev6.value + 4000), host, 16, 1, stream) == 0
    assert lib.cudaEventRecord(ev, stream) == 0
    caught("two copies")
    # Pageable (ordinary) host memory: refused unless allowed, and read when
    # the copy runs, 0.2 s after the call: by then it must be neither
    # modified nor given back to the system.
    libc = ctypes.CDLL(None)
    libc.mmap.restype = p_void
    libc.mmap.argtypes = (
        [p_void, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]
    )
    libc.munmap.argtypes = [p_void, ctypes.c_size_t]
    pageable = libc.mmap(None, 3 * 4096, 3, 0x22, -1, 0)  # RW, private anonymous
    dev7 = p_void()
    assert lib.cudaMalloc(ctypes.byref(dev7), 4 * 4096) == 0

    def copy_pageable(k, n=4096, to=None):
        src = pageable + k * 4096
        ctypes.memset(src, 40 + k, n)
        dst = p_void(dev7.value + (k if to is None else to) * 4096)
        assert lib.cudaMemcpyAsync(dst, p_void(src), n, 1, stream) == 0
        assert lib.cudaEventRecord(ev, stream) == 0
        return src

    copy_pageable(0)
    caught("copy from pageable memory, not cudaHostAlloc's")
    monkeypatch.setenv("FAKE_CUDA_ALLOW_PAGEABLE", "1")
    monkeypatch.setenv("FAKE_CUDA_DELAY_US", "200000")
    copy_pageable(1)
    assert lib.cudaEventSynchronize(ev) == 0
    assert lib.fake_cuda_violations() == caught.count  # allowed, and intact
    assert ctypes.string_at(dev7.value + 4096, 4096) == bytes([41]) * 4096
    src = copy_pageable(2, 16)
    ctypes.memset(src, 0, 16)  # reused before the copy ran
    caught("pageable copy source freed or modified before its copy ran")
    copy_pageable(2, 16, to=3)
    assert libc.munmap(pageable, 3 * 4096) == 0  # freed before the copy ran
    caught("pageable copy source freed or modified before its copy ran")
    monkeypatch.delenv("FAKE_CUDA_DELAY_US")
    # Events are counted until destroyed; FAKE_CUDA_DEVICE_BYTES bounds the
    # device memory outstanding, as an out-of-memory GPU does.
    events = lib.fake_cuda_events_outstanding()
    assert events >= 1
    assert lib.cudaEventDestroy(ev) == 0
    assert lib.fake_cuda_events_outstanding() == events - 1
    monkeypatch.setenv("FAKE_CUDA_DEVICE_BYTES", "65536")
    big = p_void()
    assert lib.cudaMalloc(ctypes.byref(big), 65536) == 2  # out of memory
    monkeypatch.delenv("FAKE_CUDA_DEVICE_BYTES")
    assert lib.cudaStreamDestroy(stream) == 0
    outstanding = lib.fake_cuda_host_outstanding()
    assert outstanding >= 1  # the leak counter sees the pinned block
    for d in (dev, dev2, dev3, dev4, dev5, dev6, dev7):
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


def test_the_current_device_is_left_alone(fake, data):
    # A loader on cuda:1 makes its device current for its own calls only:
    # the training thread's current device (0 here, set as torch would) is
    # the same after the loader's creation and after every next().
    r = run(
        fake,
        data,
        """
    fake.cudaSetDevice(0)
    gpu = ringloader.Loader(ds, batch_size=5, transform=tf, device="cuda:1",
                            num_threads=2, prefetch=2)
    seen = {fake.fake_cuda_thread_device()}
    for _ in range(2):
        for b, _ in gpu:
            seen.add(fake.fake_cuda_thread_device())
    gpu.close()
    seen.add(fake.fake_cuda_thread_device())
    report(seen=sorted(seen))
    """,
    )
    assert r["seen"] == [0] and r["violations"] == 0, r


def test_no_blocking_cuda_call_under_the_pipeline_lock(fake, data):
    # Slow copies (up to 30 ms) and prefetch 1: submit finds no free slot
    # and waits for the oldest copy; slots are allocated, and everything is
    # freed at close. The fake flags cudaHostAlloc, cudaFreeHost and
    # cudaEventSynchronize made while the thread holds the pipeline's lock,
    # and pinned memory allocated with another device current than the
    # loader's (cuda:1 from a thread whose device is 0). stats() runs
    # meanwhile from another thread.
    r = run(
        fake,
        data,
        """
    fake.cudaSetDevice(0)
    gpu = ringloader.Loader(ds, batch_size=4, transform=tf, device="cuda:1",
                            num_threads=2, prefetch=1)
    done, polls = threading.Event(), [0]
    def poll():
        while not done.is_set():
            gpu.stats()
            polls[0] += 1
    t = threading.Thread(target=poll)
    t.start()
    n = 0
    for _ in range(2):
        for b, _ in gpu:
            n += 1
    done.set()
    t.join()
    gpu.close()
    report(n=n, polls=polls[0])
    """,
        FAKE_CUDA_DELAY_US=30000,
    )
    assert r["n"] > 0 and r["polls"] > 0, r
    assert r["violations"] == 0, r
    assert r["host"] == 0, r


def test_the_loader_owns_a_non_blocking_copy_stream(fake, data):
    # The copies run on a stream the pipeline made non-blocking (the fake
    # flags a copy on any other), and that stream is gone after close().
    r = run(
        fake,
        data,
        """
    before = fake.fake_cuda_streams_outstanding()
    gpu = ringloader.Loader(ds, batch_size=5, transform=tf, device="cuda")
    first = next(iter(gpu))
    handle = gpu._pipe._c.copy_stream
    live = fake.fake_cuda_streams_outstanding()
    for _ in gpu:
        pass
    gpu.close()
    report(before=before, live=live, handle=handle,
           after=fake.fake_cuda_streams_outstanding())
    """,
    )
    assert r["violations"] == 0 and r["handle"] != 0, r
    # live: the loader's copy stream and the test double's consumer stream
    assert r["live"] == r["before"] + 2 and r["after"] == r["live"] - 1, r


def test_close_during_a_device_next_raises(fake, data):
    # close() from another thread while the training thread waits in a
    # device next(): that next() raises RuntimeError("the loader is
    # closed"), whether the batch was still decoding or finished during
    # the same wait; it never hands out a batch without its device buffer.
    # Batches take about 60-120 ms to decode; the close comes at a random
    # point of that wait, so both cases occur.
    r = run(
        fake,
        data,
        """
    import random, tempfile, time
    from images import jpeg_bytes
    d = tempfile.mkdtemp()
    for c in range(2):
        os.makedirs(f"{d}/c{c}")
        for i in range(4):
            with open(f"{d}/c{c}/{i}.jpg", "wb") as f:
                f.write(jpeg_bytes("baseline", 1600, 1200, seed=4 * c + i))
    big = ringloader.ImageFolder(d)
    slow = T.Compose([T.RandomResizedCrop((600, 800), scale=(0.8, 1.0))])
    gpu = ringloader.Loader(big, batch_size=2, transform=slow, device="cuda",
                            num_threads=1, prefetch=1)
    rng = random.Random(7)
    outcomes = []
    for trial in range(12):
        it = iter(gpu)
        delay = rng.uniform(0.0, 0.12)
        closer = threading.Timer(delay, gpu.close)
        closer.start()
        try:
            b, _ = next(it)
            gpu._gpu.synchronize()
            outcomes.append("batch" if b.sum().item() > 0 else "empty batch")
        except RuntimeError as e:
            outcomes.append(str(e))
        except Exception as e:  # what the bug gave: no device buffer
            outcomes.append(f"{type(e).__name__}: {e}")
        closer.join()
        it.close()
        gpu.close()
    report(outcomes=outcomes)
    """,
    )
    outcomes = r["outcomes"]
    assert set(outcomes) <= {"the loader is closed", "batch"}, r
    assert outcomes.count("the loader is closed") >= 3, r
    assert r["violations"] == 0 and r["host"] == 0, r


REPLACED_TAIL = """
import warnings
from torchvision import datasets, transforms as tv
fixed = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.ToTensor()])
data = datasets.ImageFolder(sys.argv[1], transform=fixed)
loader = ringloader.DataLoader(data, batch_size=4, device="cuda")
gpu = loader._gpu
natively = len(list(loader))
data.transform = tv.Compose([*fixed.transforms, tv.Lambda(lambda x: x * 2)])
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    got = list(loader)
want = list(torch.utils.data.DataLoader(data, batch_size=4))
bad = sum(
    not (gpu.placed(a) and torch.equal(a, b) and gpu.placed(la) and torch.equal(la, lb))
    for (a, la), (b, lb) in zip(got, want)
)
loader.close()
del got
report(bad=bad, batches=len(want), natively=natively,
       said=[str(w.message) for w in said])
"""


def test_a_replaced_transform_with_a_python_step_on_a_device(fake, data):
    """A transform with a Python step cannot follow the device copy: one
    put in its place makes that epoch torch's DataLoader's, its batches
    placed on the device, rather than an error at iter()."""
    r = run(fake, data, REPLACED_TAIL)
    assert r["natively"] == r["batches"] > 0 and r["bad"] == 0, r
    assert any("this epoch is read by torch" in w for w in r["said"]), r
    assert r["violations"] == 0 and r["host"] == 0 and r["dev"] == 0, r
