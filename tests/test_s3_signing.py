"""S3 GETs signed per request in C (libcurl's SigV4), against servers that
check every signature: rclone's S3 server (``--auth-key``) and moto's with
IAM authentication on (access keys of an IAM user, temporary credentials
of an assumed role with their session token). A server that ignored
signatures would prove nothing, so each server is first shown refusing a
wrongly signed request.

The keys with characters S3's canonical request encodes (space, ``+``,
``%``, ``?``, ``#``, ``=``, ``&``, unicode, ``//``, dot segments, a
trailing ``/``, a key of 1000 bytes) are read signed in C and, as with a
libcurl older than 7.75, presigned; a wrong secret fails naming the object
and never the secret or the token; credentials that change mid-epoch are
used as they change, and the old ones no more.
"""

from __future__ import annotations

import json
import logging
import tarfile
import threading
import time

import pytest
import torch
import torchvision.transforms as T
from images import KINDS, jpeg_bytes
from test_shards import _add

import ringloader
from ringloader import _core
from ringloader.datasets import presign
from ringloader.datasets.filelist import FileList
from rlbench.servers import MotoS3, RcloneS3

TF = T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.PILToTensor()])

# Keys that rclone's folder of files can hold too.
KEYS = [
    "plain.jpg",
    "with space.jpg",
    "a+b.jpg",
    "100%.jpg",
    "what?.jpg",
    "hash#tag.jpg",
    "k=v&x=y.jpg",
    "ünï/código €.jpg",
    "semi;colon,comma:at@dollar$bang!'(paren)*.jpg",
    "~tilde-_.jpg",
    "deep/" * 199 + "long.jpg",  # 1003 bytes: S3 allows 1024
]
# Keys an object store holds that a file system does not (moto only).
STORE_KEYS = ["double//slash.jpg", "dot/./segment.jpg", "dot/../dots.jpg", "dir/"]

SECRET_MARK = "Sekr3tShouldNeverShow"


def _jpegs(keys):
    kinds = sorted(KINDS)
    return {
        k: jpeg_bytes(kinds[i % len(kinds)], 40 + 3 * i, 50 + 5 * i, seed=i)
        for i, k in enumerate(keys)
    }


def _epoch(ds):
    loader = ringloader.Loader(
        ds, batch_size=4, transform=TF, seed=3, shuffle=False, num_threads=2
    )
    try:
        xs, ys = [], []
        for x, y in loader:
            xs.append(x.clone())
            ys.append(y.clone())
        return torch.cat(xs), torch.cat(ys)
    finally:
        loader.close()


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The KINDS + STORE_KEYS images as local files, and their epoch."""
    root = tmp_path_factory.mktemp("local")
    data = _jpegs(KEYS + STORE_KEYS)
    paths = []
    for i, body in enumerate(data.values()):
        p = root / f"{i}.jpg"
        p.write_bytes(body)
        paths.append(str(p))
    return data, paths


def _expected(local, keys):
    data, paths = local
    order = list(data)
    return _epoch(FileList([paths[order.index(k)] for k in keys], range(len(keys))))


@pytest.fixture(scope="module")
def rclone(local):
    with RcloneS3() as server:
        server.upload("bkt", {k: local[0][k] for k in KEYS})
        yield server


def _s3_names(keys, bucket="bkt"):
    return [f"s3://{bucket}/{k}" for k in keys]


# ---- rclone: its own dummy access key ----


def test_rclone_refuses_a_wrong_signature(rclone):
    import boto3
    from botocore.exceptions import ClientError

    bad = boto3.session.Session().client(
        "s3",
        endpoint_url=rclone.endpoint_url,
        aws_access_key_id=rclone.ACCESS_KEY,
        aws_secret_access_key="wrong",
        region_name=rclone.REGION,
    )
    with pytest.raises(ClientError) as e:
        bad.get_object(Bucket="bkt", Key="plain.jpg")
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


@pytest.mark.parametrize("how", ["signed", "presigned"])
def test_tricky_keys_on_rclone(rclone, local, how, monkeypatch):
    """Every key reads the bytes uploaded, signed in C (the plain URL, no
    query string) and presigned (libcurl older than 7.75)."""
    if how == "presigned":
        monkeypatch.setattr(_core, "http_sigv4", lambda: False)
    with rclone.environ():
        ds = FileList(_s3_names(KEYS), range(len(KEYS)))
        remote = ds.ringloader_sources().remote
        urls = remote.urls()
        assert (remote.keys is not None) == (how == "signed")
        assert all(("?" in u) == (how == "presigned") for u in urls)
        x, y = _epoch(ds)
    ex, ey = _expected(local, KEYS)
    assert torch.equal(x, ex) and torch.equal(y, ey)


def test_a_wrong_secret_names_the_object_never_the_secret(rclone, caplog):
    import boto3

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=rclone.endpoint_url,
        aws_access_key_id=rclone.ACCESS_KEY,
        aws_secret_access_key=SECRET_MARK,
        aws_session_token="Tok" + SECRET_MARK,
        region_name=rclone.REGION,
    )
    caplog.set_level(logging.DEBUG, logger="ringloader")
    ds = FileList(_s3_names(["a+b.jpg"]), [0], s3_client=client, retries=0)
    remote = ds.ringloader_sources().remote
    assert remote.keys is not None  # signed in C with the user's client's keys
    with pytest.raises(PermissionError) as e:
        _epoch(ds)
    text = str(e.value)
    assert "s3://bkt/a+b.jpg" in text and "403" in text, text
    shown = [text, repr(e.value), repr(ds), repr(remote), repr(remote.keys)]
    ours = [r for r in caplog.records if r.name.startswith("ringloader")]
    shown += [r.getMessage() for r in ours]
    shown += [str(r.exc_info) for r in ours if r.exc_info]
    assert not any(SECRET_MARK in s for s in shown), shown


def test_keys_with_control_characters_are_refused_unnamed(rclone):
    with rclone.environ():
        src = FileList(_s3_names(["plain.jpg"]), [0]).ringloader_sources()
    remote = src.remote
    p = _core.Pipeline(
        ringloader.transforms.compile_transform(TF).spec,
        paths=src.paths,
        http=dict(remote.options, names=list(remote.names), urls=remote.urls()),
    )
    try:
        with pytest.raises(ValueError) as e:
            p.set_keys("us-east-1", "AK", "x\r\nHost: evil" + SECRET_MARK, None)
        assert SECRET_MARK not in str(e.value)
        with pytest.raises(ValueError):
            p.set_keys("us-east-1:x", "AK", "secret", None)
    finally:
        p.close()


# ---- moto with IAM authentication: an IAM user's keys, STS sessions ----


class _MotoAuth:
    """moto's server with an IAM user allowed S3 and sts:AssumeRole, a role
    allowed S3, and IAM authentication on (signatures checked) until
    ``stop``."""

    def __init__(self, server: MotoS3) -> None:
        import boto3

        self.server = server
        kw = dict(
            endpoint_url=server.endpoint_url,
            region_name=server.REGION,
            aws_access_key_id=server.ACCESS_KEY,
            aws_secret_access_key=server.SECRET_KEY,
        )
        iam = boto3.client("iam", **kw)
        allow = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["s3:*", "sts:*"], "Resource": "*"}
            ],
        }
        iam.create_user(UserName="reader")
        iam.put_user_policy(
            UserName="reader", PolicyName="all", PolicyDocument=json.dumps(allow)
        )
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        self.access, self.secret = key["AccessKeyId"], key["SecretAccessKey"]
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": "arn:aws:iam::123456789012:user/reader"},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
        self.role = iam.create_role(
            RoleName="loader", AssumeRolePolicyDocument=json.dumps(trust)
        )["Role"]["Arn"]
        iam.put_role_policy(
            RoleName="loader", PolicyName="all", PolicyDocument=json.dumps(allow)
        )
        self._auth("0")  # from now on every request is checked

    def _auth(self, count: str) -> None:
        import urllib.request

        req = urllib.request.Request(
            f"{self.server.endpoint_url}/moto-api/reset-auth",
            data=count.encode(),
            headers={"Content-Type": "text/plain"},
            method="POST",
        )
        urllib.request.urlopen(req).read()

    def stop(self) -> None:
        self._auth("inf")

    def client(self, service: str, **kw):
        import boto3

        args = dict(
            endpoint_url=self.server.endpoint_url,
            region_name=self.server.REGION,
            aws_access_key_id=self.access,
            aws_secret_access_key=self.secret,
        )
        args.update(kw)
        return boto3.session.Session().client(service, **args)


@pytest.fixture(scope="module")
def moto_auth(local):
    with MotoS3() as server:
        keys = KEYS + STORE_KEYS
        server.upload("authbkt", {k: local[0][k] for k in keys})
        tars = {}
        for s in range(2):
            path = server_tar(local, s)
            tars[f"s{s}.tar"] = path
        server.upload("authshards", tars)
        auth = _MotoAuth(server)
        try:
            yield auth
        finally:
            auth.stop()


def server_tar(local, s):
    """A tar shard of half the images (by index parity), with .cls labels."""
    data, paths = local
    import os
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".tar")
    os.close(fd)
    with tarfile.open(path, "w") as tf:
        for i, body in enumerate(data.values()):
            if i % 2 == s:
                _add(tf, f"m{i:04d}.jpg", body)
                _add(tf, f"m{i:04d}.cls", str(i % 3).encode())
    return path


def test_moto_with_auth_refuses_a_wrong_signature(moto_auth):
    from botocore.exceptions import ClientError

    bad = moto_auth.client("s3", aws_secret_access_key="wrong")
    with pytest.raises(ClientError) as e:
        bad.get_object(Bucket="authbkt", Key="plain.jpg")
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    good = moto_auth.client("s3")
    assert good.get_object(Bucket="authbkt", Key="plain.jpg")["Body"].read()


def test_tricky_keys_on_moto_with_auth(moto_auth, local):
    keys = KEYS + STORE_KEYS
    ds = FileList(
        _s3_names(keys, "authbkt"), range(len(keys)), s3_client=moto_auth.client("s3")
    )
    assert ds.ringloader_sources().remote.keys is not None
    x, y = _epoch(ds)
    ex, ey = _expected(local, keys)
    assert torch.equal(x, ex) and torch.equal(y, ey)


def test_byte_ranges_signed_on_moto_with_auth(moto_auth):
    """Tar shards read by range GET (and runs of members), signed in C."""
    client = moto_auth.client("s3")
    ds = ringloader.TarShards(
        "s3://authshards/s{0..1}.tar", progress=False, s3_client=client
    )
    assert ds.ringloader_sources().remote.keys is not None
    x, y = _epoch(ds)
    assert len(y) == len(KEYS) + len(STORE_KEYS)


def _rotating(moto_auth):
    """A user's s3_client whose temporary credentials (an STS session with
    its token) boto3 renews at every use (each expires within boto3's
    15-minute advisory window). Each new session drops from moto every
    session but itself and the one before (a request may have been signed
    with that one just before the C source got the new keys): a request
    signed with an older one is refused. Returns (client, the sessions
    made: access key, secret, token)."""
    import boto3
    import botocore.session
    from botocore.credentials import RefreshableCredentials
    from moto.sts.models import sts_backends

    sts = moto_auth.client("sts")
    made, on_main = [], []
    lock = threading.Lock()

    def fetch():
        with lock:
            name = f"s{len(made)}"
            c = sts.assume_role(RoleArn=moto_auth.role, RoleSessionName=name)
            c = c["Credentials"]
            made.append((c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"]))
            on_main.append(threading.current_thread() is threading.main_thread())
            valid = {m[0] for m in made[-2:]}
            roles = sts_backends["123456789012"]["aws"].assumed_roles
            roles[:] = [r for r in roles if r.access_key_id in valid]
            return {
                "access_key": c["AccessKeyId"],
                "secret_key": c["SecretAccessKey"],
                "token": c["SessionToken"],
                "expiry_time": _in_minutes(12),
            }

    creds = RefreshableCredentials.create_from_metadata(
        metadata=fetch(), refresh_using=fetch, method="sts-assume-role"
    )
    core = botocore.session.get_session()
    core._credentials = creds
    client = boto3.session.Session(botocore_session=core).client(
        "s3", endpoint_url=moto_auth.server.endpoint_url, region_name="us-east-1"
    )
    return client, made, on_main


def _in_minutes(m: float) -> str:
    import datetime

    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=m)
    return t.isoformat()


def test_temporary_credentials_that_change_mid_epoch(moto_auth, local, monkeypatch):
    """The keys are read again before each batch (KEYS_REFRESH_S 0), each
    read renews the STS session and moto forgets the sessions before the
    last two: with no retry, one GET signed with an old session would
    fail the epoch."""
    from botocore.exceptions import ClientError

    client, made, _ = _rotating(moto_auth)
    keys = KEYS + STORE_KEYS
    monkeypatch.setattr(presign, "KEYS_REFRESH_S", 0.0)
    ds = FileList(
        _s3_names(keys, "authbkt"), range(len(keys)), s3_client=client, retries=0
    )
    remote = ds.ringloader_sources().remote
    assert remote.keys is not None and remote.refresh_s == 0.0
    before = len(made)
    x, y = _epoch(ds)
    batches = -(-len(keys) // 4)
    assert len(made) - before >= batches  # a new session before each batch
    ex, ey = _expected(local, keys)
    assert torch.equal(x, ex) and torch.equal(y, ey)

    # The first session is refused now: the C source no longer used it.
    access, secret, token = made[0]
    stale = moto_auth.client(
        "s3",
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        aws_session_token=token,
    )
    with pytest.raises(ClientError) as e:
        stale.get_object(Bucket="authbkt", Key="plain.jpg")
    assert e.value.response["Error"]["Code"] == "InvalidAccessKeyId"


def test_keys_are_read_again_in_the_background(moto_auth, local, monkeypatch):
    """Due every 0.2 s but never past due (URL_DEADLINE 1000): the keys
    are read again on the URL thread, while batches keep coming, and the
    GETs after it are signed with the new session."""
    from ringloader import _pipeline

    client, made, on_main = _rotating(moto_auth)
    keys = KEYS + STORE_KEYS
    monkeypatch.setattr(presign, "KEYS_REFRESH_S", 0.2)
    monkeypatch.setattr(_pipeline, "URL_DEADLINE", 1000.0)
    ds = FileList(
        _s3_names(keys, "authbkt"), range(len(keys)), s3_client=client, retries=0
    )
    ex, _ = _expected(local, keys)
    loader = ringloader.Loader(
        ds, batch_size=4, transform=TF, seed=3, shuffle=False, num_threads=2
    )
    try:
        for e in range(40):
            # Every GET succeeds (no retry): none was signed with a session
            # moto forgot. The first epoch's images are the local ones.
            x = torch.cat([x.clone() for x, _ in loader])
            assert x.shape == ex.shape and (e > 0 or torch.equal(x, ex))
            if on_main.count(False) >= 3:
                break
            time.sleep(0.1)
    finally:
        loader.close()
    assert on_main.count(False) >= 3  # renewed on the URL thread


def test_a_wrong_secret_on_moto_is_refused_clearly(moto_auth):
    client = moto_auth.client("s3", aws_secret_access_key=SECRET_MARK)
    ds = FileList(_s3_names(["what?.jpg"], "authbkt"), [0], s3_client=client, retries=0)
    with pytest.raises(PermissionError) as e:
        _epoch(ds)
    text = str(e.value)
    assert "s3://authbkt/what?.jpg" in text and "SignatureDoesNotMatch" in text, text
    assert SECRET_MARK not in text


def test_anonymous_reads_are_not_signed(moto_auth, local):
    """An unsigned client (a public object): plain URLs, no keys, nothing
    refreshed."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=moto_auth.server.endpoint_url,
        region_name="us-east-1",
        config=Config(signature_version=UNSIGNED),
    )
    moto_auth.client("s3").put_object_acl(
        Bucket="authbkt", Key="with space.jpg", ACL="public-read"
    )
    ds = FileList(["s3://authbkt/with space.jpg"], [0], s3_client=client)
    remote = ds.ringloader_sources().remote
    assert remote.keys is None and remote.refresh_s is None
    assert remote.urls() == [
        f"{moto_auth.server.endpoint_url}/authbkt/with%20space.jpg"
    ]
    moto_auth.stop()  # moto with IAM auth fails anonymous GETs (HTTP 500)
    try:
        x, _ = _epoch(ds)
    finally:
        moto_auth._auth("0")
    ex, _ = _expected(local, ["with space.jpg"])
    assert torch.equal(x, ex)
