"""The storage layer on a real S3 server (moto's, ``tests/s3server.py``) beside a local disk.

What the commit protocol rests on is checked on the server itself, not assumed: a second
put-if-absent of a key is refused; a create whose answer was lost and which the client retried
counts once, as its own; 5xx answers and dropped connections are retried; listings and deletes
go a page at a time; an object written through :func:`open_output` appears whole or not at all.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metastore import storage
from tests.s3server import S3Server


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.process)])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "root")
    return str(request.getfixturevalue("s3_root"))


def test_the_server_refuses_a_second_put_if_absent(s3_server: S3Server, s3_root: str) -> None:
    """The S3 API itself, through boto3 (another client than ours): 412 for If-None-Match: * on a
    key that exists, and the first body kept."""
    import boto3

    client = boto3.client("s3", endpoint_url=s3_server.direct_endpoint, **s3_server.boto_credentials())
    bucket = s3_root.removeprefix("s3://").split("/")[0]
    client.put_object(Bucket=bucket, Key="k", Body=b"first", IfNoneMatch="*")
    with pytest.raises(client.exceptions.ClientError) as refused:
        client.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert storage.read_bytes(f"s3://{bucket}/k") == b"first"


def test_put_if_absent_takes_a_path_once(root: str) -> None:
    path = storage.join(root, "_delta_log", "00000000000000000000.json")
    assert storage.put_if_absent(path, b"mine") is True
    assert storage.put_if_absent(path, b"theirs") is False
    assert storage.read_bytes(path) == b"mine"
    with pytest.raises(FileExistsError):
        storage.create(path, b"again")


def test_a_create_whose_answer_was_lost_counts_once_as_its_own(s3_server: S3Server, s3_root: str) -> None:
    """The PUT lands, its answer is lost, the client retries it and meets 412: still ours, once."""
    path = storage.join(s3_root, "_delta_log", "00000000000000000001.json")
    fault = s3_server.proxy.arm("PUT", r"_delta_log/00000000000000000001\.json", "drop-after")
    assert storage.put_if_absent(path, b"attempt-1") is True
    assert fault.hits == 1
    puts = [r for r in s3_server.proxy.requests if r[0] == "PUT" and "00000000000000000001" in r[1]]
    assert len(puts) >= 2  # the dropped one and the retry that found the key taken
    assert storage.read_bytes(path) == b"attempt-1"


def test_failures_of_the_store_are_retried(s3_server: S3Server, s3_root: str) -> None:
    path = storage.join(s3_root, "data", "f.bin")
    s3_server.proxy.arm("PUT", r"data/f\.bin", "503", times=2)
    s3_server.proxy.arm("GET", r"data/f\.bin", "drop-before", times=1)
    storage.write_bytes(path, b"payload")
    assert storage.read_bytes(path) == b"payload"


def test_a_store_that_keeps_failing_is_an_os_error_naming_it(s3_server: S3Server, s3_root: str) -> None:
    path = storage.join(s3_root, "data", "g.bin")
    s3_server.proxy.arm("PUT", r"data/g\.bin", "503", times=100)
    with pytest.raises(OSError, match=r"g\.bin"):
        storage.write_bytes(path, b"payload")
    s3_server.proxy.clear()
    assert not storage.exists(path)


def test_listing_and_deleting_in_pages(root: str) -> None:
    for i in range(25):
        storage.write_bytes(storage.join(root, "t", f"p={i % 3}", f"f{i:02d}.parquet"), b"x" * i)
    pages = list(storage.walk(storage.join(root, "t"), page=10))
    assert [len(p) for p in pages] == [10, 10, 5]
    found = sorted(rel for page in pages for rel, _ in page)
    assert found == sorted(f"p={i % 3}/f{i:02d}.parquet" for i in range(25))
    assert {e.name for e in storage.list_dir(storage.join(root, "t"))} == {"p=0", "p=1", "p=2"}
    assert all(e.is_dir for e in storage.list_dir(storage.join(root, "t")))
    assert storage.is_dir(storage.join(root, "t", "p=1"))
    assert not storage.is_dir(storage.join(root, "t", "p=9"))
    storage.delete_tree(storage.join(root, "t"))
    assert list(storage.walk(storage.join(root, "t"))) == []


def test_an_output_appears_whole_or_not_at_all(root: str) -> None:
    rows = pa.table({"a": list(range(10_000))})
    done = storage.join(root, "p", "done.parquet")
    with storage.open_output(done) as f:
        pq.write_table(rows, f)
    with storage.open_input(done) as f:
        assert pq.ParquetFile(f).read().equals(rows)
    failed = storage.join(root, "p", "failed.parquet")
    with pytest.raises(RuntimeError), storage.open_output(failed) as f:
        f.write(b"PAR1 half a file")
        raise RuntimeError("the writer died")
    assert not storage.exists(failed)
    assert [e.name for e in storage.list_dir(storage.join(root, "p"))] == ["done.parquet"]


def test_place_gives_a_file_a_second_name(root: str) -> None:
    source = storage.join(root, "_staging", "c-0.parquet")
    storage.write_bytes(source, b"chunk")
    target = storage.join(root, "_staging", "ts=1", "c-0.parquet")
    storage.place(source, target)
    storage.place(source, target)  # again: the same bytes
    assert storage.read_bytes(target) == b"chunk"
    assert storage.stat(target).size == 5


def test_secrets_stay_out_of_reprs() -> None:
    options = storage.S3Options(endpoint="http://x", access_key_id="AKIAID", secret_access_key="s3cr3t")
    assert "s3cr3t" not in repr(options) and "AKIAID" not in repr(options)
    assert options.delta_options()["AWS_ALLOW_HTTP"] == "true"


def test_the_environment_and_config_files(tmp_path: Path) -> None:
    from metastore.storage.options import from_config_files, from_environment

    (tmp_path / "credentials").write_text("[team]\naws_access_key_id = AK\naws_secret_access_key = SK\n")
    (tmp_path / "config").write_text("[profile team]\nregion = eu-west-3\nendpoint_url = http://minio:9000\n")
    env = {
        "AWS_PROFILE": "team",
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
        "AWS_CONFIG_FILE": str(tmp_path / "config"),
    }
    files = from_config_files(env)
    assert (files.endpoint, files.region, files.access_key_id, files.secret_access_key) == (
        "http://minio:9000",
        "eu-west-3",
        "AK",
        "SK",
    )
    over = from_environment({"AWS_ENDPOINT_URL": "http://other:9000"}).over(files)
    assert over.endpoint == "http://other:9000" and over.region == "eu-west-3"


def test_names_from_lists_the_tail_of_a_directory(root: str) -> None:
    log = storage.join(root, "_delta_log")
    for v in range(12):
        storage.write_bytes(storage.join(log, f"{v:020d}.json"), b"{}")
    storage.write_bytes(storage.join(log, "_last_checkpoint"), b"{}")
    storage.write_bytes(storage.join(log, "sub", "x.json"), b"{}")
    # "_" sorts after the digits: the caller picks the commit files out
    assert storage.names_from(log, f"{9:020d}") == [
        *(f"{v:020d}.json" for v in (9, 10, 11)),
        "_last_checkpoint",
    ]
    assert storage.names_from(log, f"{12:020d}") == ["_last_checkpoint"]


@pytest.mark.parametrize("stall", [1.4, 4.0], ids=["late-request-first", "retry-first"])
def test_a_create_that_timed_out_is_sent_again_until_the_store_answers(
    s3_server: S3Server, s3_root: str, stall: float
) -> None:
    """The client library does not retry a PUT that timed out (it may still be on its way):
    put_if_absent sends it again. Whichever of the two reaches the store first, the call answers
    True once and the key holds its bytes; without the resend it would raise, state unknown."""
    import time
    from datetime import timedelta

    storage.configure(storage.S3Options(request_timeout=timedelta(seconds=1)))
    try:
        path = storage.join(s3_root, "_delta_log", "00000000000000000007.json")
        fault = s3_server.proxy.arm("PUT", r"00000000000000000007\.json", "stall", seconds=stall)
        assert storage.put_if_absent(path, b"the commit") is True
        assert fault.hits == 1
        time.sleep(max(0.0, stall - 1.5) + 0.5)  # the held request has reached the store
        assert storage.read_bytes(path) == b"the commit"
        assert storage.put_if_absent(path, b"another commit") is False
    finally:
        storage.configure(storage.S3Options())
