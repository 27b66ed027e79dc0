"""Table files in an S3-compatible bucket (AWS S3, MinIO, Ceph, moto): ``s3://bucket/prefix/...``.

Through obstore, the Python binding of the Rust ``object_store`` crate delta-rs itself uses, so
streampart's own commits and delta-rs' take versions the same way. What a POSIX file system
does with a rename or a hard link, a bucket does with an object's atomic appearance:

- an object appears whole when its PUT (or its multipart upload) completes, or not at all: an
  atomic write needs no temp name;
- put-if-absent is a PUT with ``If-None-Match: *`` (the store answers 412 if the key exists):
  the commit of a Delta version;
- a "link" is a server-side copy (no bytes through this process);
- listings and deletes go a page (1,000 keys) at a time.

Transient failures (5xx, a dropped connection, a timeout) are retried by the client with
exponential backoff (``options.py`` says how long). Every failure is raised as the ``OSError``
a local file system would raise for it (``FileNotFoundError``, ``FileExistsError``,
``PermissionError``, ``OSError``), so the Delta layer's error handling is one for both; a store
that still does not serve after the retries is a ``StoreUnavailableError`` (an ``OSError`` as
well: ``faults.py`` decides).
"""

from __future__ import annotations

import contextlib
import errno
import io
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import IO, Any

from metastore.errors import StoreUnavailableError
from metastore.storage import faults
from metastore.storage.entries import Entry, FileStat
from metastore.storage.options import S3Options, current

SCHEME = "s3://"
PAGE = 1000  # S3's own page: a listing and a bulk delete take at most 1,000 keys per request

_stores: dict[tuple[str, S3Options], Any] = {}
_stores_lock = threading.Lock()


def split(url: str) -> tuple[str, str]:
    """``s3://bucket/key`` as (bucket, key); the key without leading or trailing ``/``."""
    rest = url[len(SCHEME) :]
    bucket, _, key = rest.partition("/")
    return bucket, key.strip("/")


def store(bucket: str, options: S3Options | None = None) -> Any:
    """The obstore S3Store of ``bucket`` under ``options`` (default: :func:`options.current`), kept."""
    opts = options or current()
    key = (bucket, opts)
    with _stores_lock:
        found = _stores.get(key)
        if found is None:
            found = _stores[key] = _new_store(bucket, opts)
        return found


def _new_store(bucket: str, opts: S3Options) -> Any:
    from obstore.store import S3Store

    config: dict[str, Any] = {"region": opts.signing_region}
    if opts.endpoint:
        config["endpoint"] = opts.endpoint
    if opts.access_key_id:
        config["access_key_id"] = opts.access_key_id
    if opts.secret_access_key:
        config["secret_access_key"] = opts.secret_access_key
    if opts.session_token:
        config["session_token"] = opts.session_token
    return S3Store(
        bucket,
        config=config,  # type: ignore[arg-type]
        client_options={
            "allow_http": opts.allow_http,
            "connect_timeout": opts.connect_timeout,
            "timeout": opts.request_timeout,
        },
        retry_config={
            "max_retries": opts.retries,
            "retry_timeout": opts.retry_timeout,
        },
    )


@contextlib.contextmanager
def errors(url: str) -> Iterator[None]:
    """obstore's errors as the OSError a local file system raises for the same failure."""
    from obstore import exceptions as ox

    try:
        yield
    except StoreUnavailableError:
        raise
    except (ox.NotFoundError, FileNotFoundError) as exc:
        raise FileNotFoundError(errno.ENOENT, _first(exc), url) from None
    except (ox.AlreadyExistsError, ox.PreconditionError, FileExistsError) as exc:
        raise FileExistsError(errno.EEXIST, _first(exc), url) from None
    except (ox.PermissionDeniedError, ox.UnauthenticatedError, PermissionError) as exc:
        raise PermissionError(errno.EACCES, _first(exc), url) from None
    except (ox.BaseError, OSError) as exc:
        out = faults.unavailable(exc)
        if out is not None:  # an OSError too: callers that retry or clean up on I/O failures still do
            raise out from None
        raise OSError(errno.EIO, _first(exc), url) from None
    except BaseException as exc:
        if faults.is_panic(exc):
            raise faults.panic_error(exc, f"reaching {url}") from None
        raise


def _first(exc: BaseException) -> str:
    """The useful part of an obstore message: without its debug dump and the store's XML body."""
    text = str(exc).split("Debug source:")[0].split("<?xml")[0]
    return " ".join(text.split()).rstrip(": ")[:300]


def _at(url: str) -> tuple[Any, str]:
    bucket, key = split(url)
    return store(bucket), key


def read(url: str) -> bytes:
    import obstore

    s, key = _at(url)
    with errors(url):
        return bytes(obstore.get(s, key).bytes())


def write(url: str, data: bytes) -> None:
    import obstore

    s, key = _at(url)
    with errors(url):
        obstore.put(s, key, data)


def create(url: str, data: bytes) -> None:
    """PUT with ``If-None-Match: *``: FileExistsError if the key exists (nothing written)."""
    import obstore

    s, key = _at(url)
    with errors(url):
        obstore.put(s, key, data, mode="create")


def stat(url: str) -> FileStat:
    import obstore

    s, key = _at(url)
    with errors(url):
        meta = obstore.head(s, key)
    return FileStat(int(meta["size"]), int(meta["last_modified"].timestamp() * 1000))


def is_file(url: str) -> bool:
    try:
        stat(url)
    except FileNotFoundError:
        return False
    return True


def is_dir(url: str) -> bool:
    """Whether any object's key starts with ``url/`` (a bucket has no directories of its own)."""
    import obstore

    s, key = _at(url)
    with errors(url):
        for page in obstore.list(s, prefix=f"{key}/" if key else None, chunk_size=1):
            return bool(page)
    return False


def list_dir(url: str) -> list[Entry]:
    """The objects and common prefixes directly under ``url/``."""
    import obstore

    s, key = _at(url)
    prefix = f"{key}/" if key else None
    with errors(url):
        found = obstore.list_with_delimiter(s, prefix=prefix)
    cut = len(prefix or "")
    out = [Entry(p[cut:].rstrip("/"), True, 0, 0) for p in found["common_prefixes"]]
    out += [
        Entry(m["path"][cut:], False, int(m["size"]), int(m["last_modified"].timestamp() * 1000))
        for m in found["objects"]
    ]
    return sorted(out, key=lambda e: e.name)


def names_from(url: str, first: str) -> list[str]:
    """The names of the objects directly under ``url/`` that sort at or after ``first``: one listing
    that starts there (S3's ``start-after``), a page of 1,000 per request."""
    import obstore

    s, key = _at(url)
    prefix = f"{key}/" if key else ""
    out: list[str] = []
    with errors(url):
        # every key that starts with ``first`` sorts after ``first`` cut short by one character
        for batch in obstore.list(s, prefix=prefix or None, offset=prefix + first[:-1], chunk_size=PAGE):
            out += [m["path"][len(prefix) :] for m in batch]
    return sorted(n for n in out if "/" not in n and n >= first)


def walk(url: str, page: int) -> Iterator[list[tuple[str, Entry]]]:
    """Every object under ``url/`` as (key relative to it, entry), a listing page at a time."""
    import obstore

    s, key = _at(url)
    prefix = f"{key}/" if key else ""
    with errors(url):
        for batch in obstore.list(s, prefix=prefix or None, chunk_size=min(page, PAGE)):
            yield [
                (
                    m["path"][len(prefix) :],
                    Entry(
                        m["path"].rsplit("/", 1)[-1],
                        False,
                        int(m["size"]),
                        int(m["last_modified"].timestamp() * 1000),
                    ),
                )
                for m in batch
            ]


def delete(urls: list[str]) -> None:
    """Delete objects (absent ones are no error), 1,000 per request, grouped by bucket."""
    import obstore

    by_bucket: dict[str, list[str]] = {}
    for url in urls:
        bucket, key = split(url)
        by_bucket.setdefault(bucket, []).append(key)
    for bucket, keys in by_bucket.items():
        s = store(bucket)
        for i in range(0, len(keys), PAGE):
            with errors(f"{SCHEME}{bucket}/{keys[i]}"):
                obstore.delete(s, keys[i : i + PAGE])


def delete_tree(url: str) -> None:
    """Delete ``url`` and every object under ``url/``, a page at a time."""
    with contextlib.suppress(FileNotFoundError):
        delete([url])
    for batch in walk(url, PAGE):
        delete([f"{url.rstrip('/')}/{rel}" for rel, _ in batch])


def place(source: str, target: str) -> None:
    """Make ``target`` hold ``source``'s bytes: a server-side copy (a bucket has no links)."""
    import obstore

    bucket, src = split(source)
    tbucket, dst = split(target)
    if bucket != tbucket:
        raise ValueError(f"cannot place {source} in another bucket ({target})")
    with errors(source):
        obstore.copy(store(bucket), src, dst)


class _Reader(io.RawIOBase):
    """obstore's ReadableFile as a standard binary file (pyarrow asks for ``closed``, an attribute)."""

    def __init__(self, url: str, file: Any) -> None:
        super().__init__()
        self._url, self._file = url, file

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with errors(self._url):
            data = self._file.read(len(buffer))
        n = len(data)
        memoryview(buffer).cast("B")[:n] = memoryview(data)
        return n

    def read(self, size: int = -1) -> bytes:
        with errors(self._url):
            return bytes(self._file.read() if size is None or size < 0 else self._file.read(size))

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._file.seek(offset, whence))

    def tell(self) -> int:
        return int(self._file.tell())

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()


class _Writer(io.RawIOBase):
    """obstore's WritableFile as a standard binary file; :meth:`finish` completes the upload."""

    def __init__(self, url: str, file: Any) -> None:
        super().__init__()
        self._url, self._file, self._written = url, file, 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        with errors(self._url):
            n = int(self._file.write(data))
        self._written += n
        return n

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        pass  # the upload happens in parts as the buffer fills, and completes in finish()

    def finish(self) -> None:
        with errors(self._url):
            self._file.close()


def open_input(url: str) -> IO[bytes]:
    import obstore

    s, key = _at(url)
    with errors(url):
        return _Reader(url, obstore.open_reader(s, key))  # type: ignore[return-value]


@contextlib.contextmanager
def open_output(url: str) -> Iterator[IO[bytes]]:
    """An object that appears at ``url`` whole when the block ends (its upload completes), and not at
    all if the block raises (a multipart upload never completed is invisible; the store drops it)."""
    import obstore

    s, key = _at(url)
    with errors(url):
        writer = _Writer(url, obstore.open_writer(s, key))
    yield writer  # type: ignore[misc]
    writer.finish()


def presign(url: str, method: str, expires_in: timedelta) -> str:
    """A URL that lets its holder ``method`` (GET or HEAD) the object ``url`` until ``expires_in`` from
    now, signed with this process's credentials (which the URL does not reveal)."""
    import obstore

    s, key = _at(url)
    verb: Any = method
    with errors(url):
        return obstore.sign(s, verb, key, expires_in)


def check(url: str, setting: str) -> None:
    """Check that the bucket of ``url`` exists and answers these credentials, with one small listing.

    Raises:
        UserInputError: naming ``setting`` (where the URL came from) and what is wrong: the
            store refuses the credentials, the bucket does not exist, or the endpoint is no store.
            Nothing is created: streampart never makes buckets.
        StoreUnavailableError: the store did not answer (refused, dropped or timed out: down, or
            a wrong address), or answered that it is busy (a 5xx).
    """
    import obstore
    from obstore import exceptions as ox

    from metastore.errors import StoreUnavailableError, UserInputError

    bucket, key = split(url)
    opts = current()
    where = opts.where()
    if not bucket:
        raise UserInputError(f"{setting} {url}: no bucket named (s3://BUCKET/PREFIX)")
    try:
        for _ in obstore.list(store(bucket, opts), prefix=f"{key}/" if key else None, chunk_size=1):
            break
    except (ox.BaseError, OSError) as exc:
        text = str(exc)
        out = faults.unavailable(exc, f"checking {setting} {url}")
        if out is not None and out.answered and out.answered[:1].isdigit():
            raise out from None  # it answered (503 Slow Down, say): the endpoint is right, the store busy
        if "169.254.169.254" in text or "169.254.170.2" in text:  # the instance's metadata service
            raise UserInputError(
                f"{setting} {url}: no credentials for the store at {where}: none set, and none from "
                "an instance role (set storage.access_key_id and storage.secret_access_key, or "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
            ) from None
        refused = ("403 Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied")
        if isinstance(exc, ox.PermissionDeniedError | ox.UnauthenticatedError | PermissionError) or any(
            s in text for s in refused
        ):
            raise UserInputError(
                f"{setting} {url}: the store at {where} refused the credentials (set storage.access_key_id "
                "and storage.secret_access_key, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            ) from None
        if "404 Not Found" in text or "NoSuchBucket" in text or isinstance(exc, ox.NotFoundError):
            raise UserInputError(
                f"{setting} {url}: bucket {bucket} does not exist at {where} (create it first: "
                "streampart makes no buckets; or set storage.endpoint / AWS_ENDPOINT_URL)"
            ) from None
        if out is not None:  # no answer (refused, dropped, timed out): a store down, or a wrong address
            raise StoreUnavailableError(
                f"{setting} {url}: the store at {where} does not answer ({_first(exc)}); if it is down, "
                "retry once it answers; if the address is wrong, set storage.endpoint or AWS_ENDPOINT_URL",
                store=out.store,
                answered=out.answered,
            ) from None
        raise UserInputError(
            f"{setting} {url}: the store at {where} does not answer ({_first(exc)}); check "
            "storage.endpoint or AWS_ENDPOINT_URL"
        ) from None
    except BaseException as exc:
        if faults.is_panic(exc):
            raise faults.panic_error(exc, f"checking {setting} {url}") from None
        raise
