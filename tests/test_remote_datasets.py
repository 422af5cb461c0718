"""TarShards and FileList over HTTP (nginx) and S3 (moto's server): the
same samples, indexes and bytes as the local shards they were copied from;
sidecars, the index cache, errors that name the URL and never a presigned
one. Real servers on 127.0.0.1 (benchmarks/rlbench/servers.py), no mocks."""

from __future__ import annotations

import os
import pickle
import shutil
import tarfile
import threading
import time
from urllib.parse import parse_qsl, urlsplit

import numpy as np
import pytest
import ringloader
import torch
import urllib3
from faultproxy import FaultProxy
from rlbench.servers import MotoS3, Nginx, ServerError, find_nginx
from ringloader import _pipeline as pipeline_module
from ringloader.datasets import presign as presign_module
from ringloader import _core
from ringloader.datasets import presign
from ringloader.datasets.filelist import FileList
from ringloader.datasets.remote import Client
from ringloader.datasets.shards import ShardError, TarShards
from ringloader.datasets.composed import UnreadableComposition, Composed
from test_shards import EVAL, _add, data  # noqa: F401  (data: the shards fixture)

torch_data = pytest.importorskip("torch.utils.data")

SHARDS = ["train-000.tar", "train-001.tar", "train-002.tar"]
SECRETS = ("Signature", "X-Amz-", "AWSAccessKeyId", "Expires=")


@pytest.fixture(scope="module")
def www(data, tmp_path_factory):  # noqa: F811
    """The served folder: plain/ (the shards), side/ (the shards with
    their sidecar indexes), bad/ (a truncated shard), img/ (JPEG files)."""
    root = tmp_path_factory.mktemp("www")
    for sub in ("plain", "side", "bad"):
        (root / sub).mkdir()
        for name in SHARDS:
            shutil.copy(data[1] / name, root / sub / name)
    TarShards(str(root / "side" / "*.tar"), cache_dir=root / "unused")
    with tarfile.open(root / "bad" / "train-002.tar") as tf:
        last = [m for m in tf.getmembers() if m.name.endswith(".jpg")][-1]
    os.truncate(root / "bad" / "train-002.tar", last.offset_data + last.size // 2)
    (root / "img").mkdir()
    for key, _, blob in data[2][:4]:
        (root / "img" / (key.replace("/", "_") + ".jpg")).write_bytes(blob)
    return root, last.name


@pytest.fixture(scope="module")
def nginx(www):
    if find_nginx() is None:
        pytest.fail("nginx is missing: apt-get install nginx (CI installs it)")
    with Nginx(www[0], access_log=True) as server:
        yield server


@pytest.fixture(scope="module")
def s3(www):
    with MotoS3() as server:
        for sub in ("plain", "side", "bad", "img"):
            server.upload("shards", www[0] / sub, prefix=sub + "/")
        yield server


@pytest.fixture(scope="module")
def local(data):  # noqa: F811
    return TarShards(str(data[1] / "*.tar"), cache_dir=data[1] / "cache")


def _same_samples(remote: TarShards, local: TarShards) -> None:
    assert len(remote) == len(local)
    for name in ("offsets", "lengths", "targets", "starts"):
        assert np.array_equal(getattr(remote, name), getattr(local, name)), name
    for i in range(len(local)):
        assert remote.key(i) == local.key(i)
        assert remote.read(i) == local.read(i)
        shard = local.shard_of(i)
        assert remote.describe(i) == local.describe(i).replace(
            local.shards[shard], remote.shards[shard]
        )


def _same_index(remote: TarShards, local: TarShards) -> None:
    for a, b in zip(remote.index_files, local.index_files):
        with np.load(a) as za, np.load(b) as zb:
            for k in zb.files:
                if k not in ("shard", "mtime_ns"):
                    assert np.array_equal(za[k], zb[k]), k


def _under(server: Nginx, folder: str) -> list:
    """The requests nginx served under /folder/."""
    return [r for r in server.requests() if r[1].startswith(f"/{folder}/")]


def test_http_shards_equal_local(nginx, local, tmp_path):
    url = nginx.url + "/plain/train-{000..002}.tar"
    nginx.clear_requests()
    ds = TarShards(url, cache_dir=tmp_path)
    assert ds.shards == [f"{nginx.url}/plain/{n}" for n in SHARDS]
    _same_samples(ds, local)
    _same_index(ds, local)
    whole = [r for r in _under(nginx, "plain") if r[:3:2] == ("GET", 200)]
    assert sorted(r[1] for r in whole) == [f"/plain/{n}" for n in SHARDS]  # one pass
    src = ds.ringloader_sources()
    assert src.paths[0] == ds.shards[0] and src.paths[len(ds) - 1] == ds.shards[2]
    assert src.remote.names == ds.shards and src.remote.urls() == ds.shards
    assert src.remote.refresh_s is None
    assert src.remote.options["retries"] == 5 and src.remote.options["timeout"] == 30
    assert src.remote.options["verify"] is True
    again = pickle.loads(pickle.dumps(ds))
    assert again.read(3) == local.read(3)


def test_index_cached_by_etag_and_size(nginx, www, local, tmp_path):
    folder = www[0] / "again"
    shutil.copytree(www[0] / "plain", folder)
    url = nginx.url + "/again/train-{000..002}.tar"
    TarShards(url, cache_dir=tmp_path)
    nginx.clear_requests()
    ds = TarShards(url, cache_dir=tmp_path, timeout=5.0, retries=1)
    assert [r[0] for r in _under(nginx, "again")] == ["HEAD"] * 3  # no download
    assert ds.ringloader_sources().remote.options["timeout"] == 5.0
    _same_samples(ds, local)
    # Replace one shard: one sample fewer, other offsets (a new size, ETag).
    path = folder / "train-002.tar"
    with tarfile.open(path) as tf:
        members = [(m.name, tf.extractfile(m).read()) for m in tf.getmembers()]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        _add(tf, "padding.bin", b"\0" * 3000)
        for name, blob in members:
            if "img_04" not in name:
                _add(tf, name, blob)
    nginx.clear_requests()
    new = TarShards(url, cache_dir=tmp_path)
    gets = [r[1] for r in _under(nginx, "again") if r[0] == "GET" and not r[3]]
    assert gets == ["/again/train-002.tar.idx.npz", "/again/train-002.tar"]
    assert len(new) == len(local) - 1
    assert [new.read(i) for i in range(len(new))] == [
        local.read(i) for i in range(len(local) - 1)
    ]


def test_sidecar_is_used_without_reading_the_shard(nginx, local, tmp_path):
    nginx.clear_requests()
    ds = TarShards(nginx.url + "/side/train-{000..002}.tar", cache_dir=tmp_path)
    got = sorted((r[0], r[1]) for r in _under(nginx, "side"))
    assert got == sorted(
        [("HEAD", f"/side/{n}") for n in SHARDS]
        + [("GET", f"/side/{n}.idx.npz") for n in SHARDS]
    )
    _same_samples(ds, local)


def test_http_errors_name_the_url(nginx, www, tmp_path):
    bad = nginx.url + "/bad/train-002.tar"
    with pytest.raises(ShardError) as e:
        TarShards(bad, cache_dir=tmp_path)
    assert bad in str(e.value) and www[1] in str(e.value)
    assert "truncated" in str(e.value)
    missing = nginx.url + "/plain/train-999.tar"
    with pytest.raises(FileNotFoundError, match=f"{missing}: no such object"):
        TarShards(missing, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="cannot be listed"):
        TarShards(nginx.url + "/plain/train-*.tar", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="mixed"):
        TarShards([missing, str(www[0] / "plain" / SHARDS[0])], cache_dir=tmp_path)
    with pytest.raises(ValueError, match="only local"):
        TarShards("ftp://example.com/a.tar", cache_dir=tmp_path)


def test_connection_refused_says_so(tmp_path):
    from rlbench.servers import free_port

    url = f"http://127.0.0.1:{free_port()}/a.tar"
    with pytest.raises(ConnectionError, match="is the server running"):
        TarShards(url, cache_dir=tmp_path, retries=0)


def test_s3_glob_braces_and_presigned_urls(s3, local, tmp_path, monkeypatch):
    client = s3.client()
    ds = TarShards(
        "s3://shards/plain/train-*.tar", cache_dir=tmp_path, s3_client=client
    )
    assert ds.shards == [f"s3://shards/plain/{n}" for n in SHARDS]
    _same_samples(ds, local)
    _same_index(ds, local)
    braces = TarShards(
        "s3://shards/plain/train-{000..002}.tar", cache_dir=tmp_path, s3_client=client
    )
    assert braces.shards == ds.shards
    across = TarShards(
        "s3://shards/*/train-00[0].tar", cache_dir=tmp_path, s3_client=client
    )
    assert across.shards == [
        f"s3://shards/{d}/train-000.tar" for d in ("bad", "plain", "side")
    ]
    # Signed per request in C with the client's (long-term) keys: plain
    # URLs, keys read once.
    remote = ds.ringloader_sources().remote
    assert remote.names == ds.shards and remote.refresh_s is None
    assert remote.keys is not None and not any("?" in u for u in remote.urls())
    assert not any(s in repr(ds) + repr(remote) for s in SECRETS)
    # Presigned where libcurl cannot sign (older than 7.75).
    monkeypatch.setattr(_core, "http_sigv4", lambda: False)
    ds = TarShards(
        "s3://shards/plain/train-*.tar", cache_dir=tmp_path, s3_client=client
    )
    remote = ds.ringloader_sources().remote
    assert remote.keys is None and remote.refresh_s == 300
    urls = remote.urls()
    assert all("X-Amz-Signature=" in u for u in urls)
    i = len(ds) - 1
    off, n = int(ds.offsets[i]), int(ds.lengths[i])
    r = urllib3.request("GET", urls[2], headers={"Range": f"bytes={off}-{off + n - 1}"})
    assert r.status == 206 and r.data == local.read(i)


def test_s3_from_environment_and_sidecars(s3, local, tmp_path, monkeypatch):
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    ds = TarShards("s3://shards/plain/train-{000..002}.tar", cache_dir=tmp_path)
    _same_samples(ds, local)
    # A client of the user's, whose calls are counted by boto3's events.
    client = s3.client()
    calls = []
    client.meta.events.register(
        "provide-client-params.s3.GetObject",
        lambda params, **k: calls.append(params["Key"]),
    )
    side = TarShards(
        "s3://shards/side/train-*.tar", cache_dir=tmp_path, s3_client=client
    )
    assert sorted(calls) == [f"side/{n}.idx.npz" for n in SHARDS]
    _same_samples(side, local)


def test_s3_errors_name_the_object_never_a_signature(s3, www, tmp_path):
    client = s3.client()
    bad = "s3://shards/bad/train-002.tar"
    with pytest.raises(ShardError) as e:
        TarShards(bad, cache_dir=tmp_path, s3_client=client)
    assert bad in str(e.value) and www[1] in str(e.value)
    errors = [str(e.value)]
    for url, kind in [
        ("s3://shards/plain/train-999.tar", FileNotFoundError),
        ("s3://no-such-bucket/train-000.tar", FileNotFoundError),
        ("s3://shards/nothing/*.tar", FileNotFoundError),
    ]:
        with pytest.raises(kind) as e:
            TarShards(url, cache_dir=tmp_path, s3_client=client)
        assert url in str(e.value)
        errors.append(str(e.value))
    assert not any(s in text for text in errors for s in SECRETS)


def test_s3_anonymous_without_credentials(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint_url)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = s3.client()
    for key in ("side/train-000.tar", "side/train-000.tar.idx.npz"):
        client.put_object_acl(Bucket="shards", Key=key, ACL="public-read")
    ds = TarShards("s3://shards/side/train-000.tar", cache_dir=tmp_path)
    assert not presign.signs(ds.client.s3())
    remote = ds.ringloader_sources().remote
    assert remote.refresh_s is None and remote.keys is None
    (url,) = remote.urls()
    assert "?" not in url and urllib3.request("GET", url).status == 200


def test_file_list_of_urls(nginx, s3, www, data, tmp_path):  # noqa: F811
    names = sorted(os.listdir(www[0] / "img"))
    blobs = [(www[0] / "img" / n).read_bytes() for n in names]
    for base, kw in [
        (nginx.url + "/img", {}),
        ("s3://shards/img", {"s3_client": s3.client()}),
    ]:
        urls = [f"{base}/{n}" for n in names]
        fl = FileList(urls, range(len(urls)), **kw)
        src = fl.ringloader_sources()
        assert list(src.paths) == urls and src.offsets is None
        assert list(src.remote.names) == urls and len(src.remote.urls()) == len(urls)
        assert [fl._sample(i)[1] for i in range(len(fl))] == blobs
        image, label = fl[1]
        assert label == 1 and image.shape[0] == 3
        csv = tmp_path / "list.csv"
        csv.write_text(
            "path,label\n" + "".join(f"{n},{i}\n" for i, n in enumerate(names))
        )
        assert list(FileList.from_csv(csv, root=base, **kw).paths) == urls
        csv.write_text("".join(f"{u},{i}\n" for i, u in enumerate(urls)))
        assert list(FileList.from_csv(csv, **kw).paths) == urls
    with pytest.raises(ValueError, match="mixed"):
        FileList([urls[0], str(www[0] / "img" / names[0])], [0, 1])


def test_views_merge_remote_leaves(nginx, s3, local, tmp_path):
    a = TarShards(nginx.url + "/plain/train-{000..001}.tar", cache_dir=tmp_path)
    b = TarShards(
        "s3://shards/plain/train-002.tar", cache_dir=tmp_path, s3_client=s3.client()
    )
    both = torch_data.ConcatDataset([a, torch_data.Subset(b, [4, 0]), a])
    src = Composed(both).ringloader_sources()
    assert list(src.remote.names) == a.shards + b.shards
    # The S3 leaf is signed in C with its client's long-term keys.
    assert src.remote.refresh_s is None and src.remote.keys is not None
    urls = src.remote.urls()
    assert urls[:2] == a.shards and urls[2].endswith("/train-002.tar")
    assert src.paths[len(a)] == b.shards[0]
    # Each sample's object by its part's: the shard of each, a named once.
    shard_of = [a.shards[0]] * int(a.starts[1]) + [a.shards[1]] * int(
        a.starts[2] - a.starts[1]
    )
    assert list(src.paths) == shard_of + b.shards * 2 + shard_of
    assert src.offsets[len(a)] == b.offsets[4]
    with pytest.raises(UnreadableComposition, match="not supported yet"):
        Composed(torch_data.ConcatDataset([a, local])).ringloader_sources()


def test_nginx_fails_clearly(tmp_path, monkeypatch):
    with pytest.raises(ServerError, match="no such folder"):
        Nginx(tmp_path / "missing")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    # Without nginx, a folder that is not there is still named first: the
    # caller's mistake, whatever the machine has.
    with pytest.raises(ServerError, match="no such folder"):
        Nginx(tmp_path / "missing")
    with pytest.raises(ServerError, match="apt-get install nginx"):
        Nginx(tmp_path)


@pytest.fixture
def presigning(monkeypatch):
    """S3 URLs presigned, as with a libcurl older than 7.75 (else the C
    source signs each GET itself)."""
    monkeypatch.setattr(_core, "http_sigv4", lambda: False)


def _expires(url: str) -> int:
    return int(dict(parse_qsl(urlsplit(url).query))["X-Amz-Expires"])


def test_presigned_urls_live_as_long_as_the_credentials_allow(
    presigning, s3, monkeypatch
):
    """Long-term keys: URLs for the 7 days SigV4 allows, made again daily.
    Temporary credentials (a session token), or a user's client whose kind
    is not known: an hour, made again every 5 minutes."""
    name = "s3://shards/plain/train-000.tar"
    with s3.environ():
        long_term = Client().remote([name])
        assert long_term.refresh_s == 24 * 3600
        (url,) = long_term.urls()
        assert _expires(url) == 7 * 24 * 3600 and "X-Amz-Security-Token" not in url
        monkeypatch.setenv("AWS_SESSION_TOKEN", "a-session-token")
        temporary = Client().remote([name])
        assert temporary.refresh_s == 300
        (url,) = temporary.urls()
        assert _expires(url) == 3600 and "X-Amz-Security-Token=" in url
    users = Client(s3_client=s3.client()).remote([name])
    assert users.refresh_s == 300 and _expires(users.urls()[0]) == 3600


def _epochs(loader, until, pause=0.0):
    """Epochs of ``loader`` (a training step of 20 ms after each batch)
    until ``until()``, at most 60 s: (the epochs' images, each wait for a
    batch but an epoch's first)."""
    epochs, waits = [], []
    deadline = time.monotonic() + 60
    while not until() and time.monotonic() < deadline:
        xs, t = [], time.monotonic()
        for x, _ in loader:
            if xs:
                waits.append(time.monotonic() - t)
            xs.append(x.clone())
            time.sleep(0.02)
            t = time.monotonic()
        epochs.append(torch.cat(xs))
        time.sleep(pause)
    return epochs, waits


def _urls_threads_end():
    deadline = time.monotonic() + 30
    while any(t.name == "ringloader-urls" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a URL thread is still running"
        time.sleep(0.05)


def test_urls_are_made_again_without_stalling_the_loop(
    presigning, tmp_path, s3, monkeypatch
):
    """When the URLs are due, they are made on a thread of their own (here
    slowed to 3 s) while batches keep coming, then handed to the C source:
    the fetches after it go where the new URLs point (a proxy in front of
    the same server)."""
    monkeypatch.setattr(presign_module, "LONG_TERM_REFRESH_S", 0.3)
    monkeypatch.setattr(pipeline_module, "URL_DEADLINE", 1000.0)
    made = []
    presign = Client.fetch_urls

    with FaultProxy(s3.endpoint_url) as proxy, s3.environ():

        def slow_fetch_urls(self, names, signed=False):
            urls = presign(self, names, signed)
            if threading.current_thread() is threading.main_thread():
                return urls
            made.append(time.monotonic())
            time.sleep(3.0)
            return [u.replace(s3.endpoint_url, proxy.url) for u in urls]

        monkeypatch.setattr(Client, "fetch_urls", slow_fetch_urls)
        ds = TarShards(
            "s3://shards/plain/train-{000..002}.tar", cache_dir=tmp_path, progress=False
        )
        with ringloader.Loader(ds, batch_size=4, transform=EVAL) as loader:
            epochs, waits = _epochs(loader, lambda: proxy.requests)
        _urls_threads_end()
    assert made and proxy.requests, "the URLs were never made again"
    assert max(waits) < 1.5, max(waits)  # never the 3 s of the refresh
    assert all(r.status == 206 for r in proxy.requests)
    assert all(torch.equal(e, epochs[0]) for e in epochs)


def test_urls_that_may_have_expired_are_replaced_before_a_batch(
    presigning, tmp_path, s3, monkeypatch
):
    """After a pause longer than 1.5 x refresh_s, the next batch waits for
    new URLs: every fetch of the epoch after the pause uses them."""
    monkeypatch.setattr(presign_module, "LONG_TERM_REFRESH_S", 1.0)
    presign = Client.fetch_urls
    redirect = []

    with FaultProxy(s3.endpoint_url) as proxy, s3.environ():

        def fetch_urls(self, names, signed=False):
            urls = presign(self, names, signed)
            if redirect:
                urls = [u.replace(s3.endpoint_url, proxy.url) for u in urls]
            return urls

        monkeypatch.setattr(Client, "fetch_urls", fetch_urls)
        ds = TarShards(
            "s3://shards/plain/train-{000..002}.tar", cache_dir=tmp_path, progress=False
        )
        with ringloader.Loader(ds, batch_size=4, transform=EVAL) as loader:
            xs = [x.clone() for x, _ in loader]
            redirect.append(True)
            time.sleep(1.6)
            ys = [y.clone() for y, _ in loader]
        _urls_threads_end()
    # Every sample of the epoch after the pause came through the proxy.
    gets = []
    for r in proxy.requests:
        a, b = r.range.split("=")[1].split("-")
        gets.append((r.path.split("?")[0].rsplit("/", 1)[1], int(a), int(b)))
    for i in range(len(ds)):
        shard = ds.shards[ds.shard_of(i)].rsplit("/", 1)[1]
        off, n = int(ds.offsets[i]), int(ds.lengths[i])
        assert any(s == shard and a <= off and off + n - 1 <= b for s, a, b in gets)
    assert all(torch.equal(x, y) for x, y in zip(xs, ys))


def test_urls_that_cannot_be_made_again_fail_clearly(
    presigning, tmp_path, s3, monkeypatch, caplog
):
    """A failed refresh in the background is logged and batches go on with
    the URLs in use; once those may have expired, the error is raised."""
    monkeypatch.setattr(presign_module, "LONG_TERM_REFRESH_S", 0.3)
    monkeypatch.setattr(pipeline_module, "URL_DEADLINE", 10.0)  # due at 3 s
    presign = Client.fetch_urls
    calls = []

    with s3.environ():

        def fetch_urls(self, names, signed=False):
            calls.append(threading.current_thread() is threading.main_thread())
            if len(calls) > 1:
                raise PermissionError("s3://shards: the credentials were revoked")
            return presign(self, names, signed)

        monkeypatch.setattr(Client, "fetch_urls", fetch_urls)
        ds = TarShards(
            "s3://shards/plain/train-{000..002}.tar", cache_dir=tmp_path, progress=False
        )
        with ringloader.Loader(ds, batch_size=2, transform=EVAL) as loader:
            with pytest.raises(PermissionError, match="revoked"):
                _epochs(loader, lambda: False)
        _urls_threads_end()
    assert calls[:3] == [True, False, True]  # made; in the background; here
    assert "making the S3 URLs again failed" in caplog.text


def test_presigning_many_objects_shows_a_bar(presigning, s3, monkeypatch, capsys):
    monkeypatch.setattr(presign_module, "PRESIGN_BAR", 3)
    names = [f"s3://shards/plain/{n}" for n in SHARDS]
    with s3.environ():
        urls = Client().remote(names).urls()
    assert len(urls) == 3
    assert "presigning S3 URLs" in capsys.readouterr().err
    monkeypatch.setattr(presign_module, "PRESIGN_BAR", 4)
    with s3.environ():
        Client().remote(names).urls()
    assert "presigning" not in capsys.readouterr().err


def test_urls_slower_to_make_than_their_cadence_are_reported_once(
    presigning, tmp_path, s3, monkeypatch, caplog
):
    monkeypatch.setattr(presign_module, "LONG_TERM_REFRESH_S", 0.2)
    presign = Client.fetch_urls

    def slow(self, names, signed=False):
        time.sleep(0.3)
        return presign(self, names, signed)

    with s3.environ():
        monkeypatch.setattr(Client, "fetch_urls", slow)
        ds = TarShards(
            "s3://shards/plain/train-{000..002}.tar", cache_dir=tmp_path, progress=False
        )
        with ringloader.Loader(ds, batch_size=4, transform=EVAL) as loader:
            _epochs(loader, lambda: "longer than" in caplog.text)
            for _ in loader:  # one more epoch: said once only
                pass
        _urls_threads_end()
    said = [r for r in caplog.records if "longer than they may be used" in r.message]
    assert len(said) == 1 and "tar shards" in said[0].message
