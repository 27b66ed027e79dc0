"""What a failure of the object store means: the store is *unavailable*, or something else.

Decided here once, for every client that reaches a bucket: obstore (streampart's own reads and
commits), delta-rs (loading a Delta log, its commits) and pyarrow (data files through
obstore). They all report a store that does not serve as text from the Rust ``object_store``
crate (``Generic S3 error: Error performing GET http://…/key in 1.9s, after 4 retries … -
Server returned non-2xx status code: 503 Service Unavailable``); :func:`unavailable` reads that
text and returns a :class:`~metastore.errors.StoreUnavailableError` naming the store's address
and what it answered, or None when the failure is something else (a missing key, refused
credentials, bytes that do not parse: only those may be called damage).

A Spark job whose task met such a failure reports it as text (the Python worker's traceback
inside the Java exception the job failed with): :func:`relayed` reads that text back into the same
error, and only that text, not every Spark failure that mentions a timeout or a refused connection.
An error raised ``from`` one of these (a commit whose state is unknown, say) reports it too.

A panic in a native library (``pyo3_runtime.PanicException``, a ``BaseException``) is turned
into one line by :func:`panic_error`: the settings checks (``options.py``) keep known causes
from reaching one.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from metastore.errors import StorageError, StoreUnavailableError, StreampartError

# Why 2 s: a store that sheds load (503 Slow Down) asks clients to back off; the client library
# retried for storage.retry_timeout already, so the caller's next attempt comes a little later.
RETRY_AFTER_S = 2

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STATUS = re.compile(r"status code:?\s*(?P<code>429|5\d\d)\b(?P<reason>[A-Za-z ]*)")
_ANY_STATUS = re.compile(r"status(?: code)?:? *[1-5]\d\d\b", re.IGNORECASE)
_S3_CODE = re.compile(r"<Code>(?P<code>[A-Za-z]+)</Code>")
_REQUEST = re.compile(r"Error performing (?P<method>[A-Z]+) (?P<url>\S+)")
_RETRIES = re.compile(r"in (?P<took>[\d.]+m?s), after (?P<retries>\d+) retries")
# what the HTTP client says when no answer came, most specific first
_NO_ANSWER = (
    ("connection refused", "refused the connection"),
    ("dns error", "could not be resolved"),
    ("connection closed before message completed", "closed the connection without answering"),
    ("connection reset", "reset the connection"),
    ("broken pipe", "closed the connection"),
    ("operation timed out", "did not answer in time"),
    ("timed out", "did not answer in time"),
    ("timeout", "did not answer in time"),
    ("error sending request", "did not answer (the request could not be sent)"),
    ("connection error", "did not answer (a connection error)"),
)


# What every unavailable message ends with (and how :func:`relayed` knows one in another's text)
_RETRY_HINT = (
    "nothing was found damaged: retry once the store answers (storage.retries, "
    "storage.retry_timeout: how long each request is retried)"
)
# An unavailable message as this module words it: the store, and what it said (how it answered, to
# what request, while doing what)
_RELAYED = re.compile(
    r"the store at (?P<store>\S+) is unavailable: it (?P<said>.+?); " + re.escape(_RETRY_HINT)
)
_ANSWERED = re.compile(
    r"answered (?P<answered>(?:429|5\d\d)[A-Za-z ]*?(?: \([A-Za-z]+\))?)(?= to | while | \(after |$)"
)


def plain(text: str) -> str:
    """A native library's message on one line: without colours, ``↳`` markers and line breaks."""
    return " ".join(_ANSI.sub("", text).replace("↳", " ").split())


def unavailable(exc: BaseException, what: str | None = None) -> StoreUnavailableError | None:
    """The store-unavailable error ``exc`` is (or reports, or was raised from), or None if it is
    another failure.

    ``what`` says what was being done (``reading the Delta log of table ns.t``), for the message.
    A streampart error's text is not read: whoever raised it decided what it is (a metastore that
    refused the connection is not the store), and only the errors it was raised from are looked at.
    """
    for cause in _chain(exc):
        if isinstance(cause, StoreUnavailableError):
            return cause
    if isinstance(exc, StreampartError):
        return None
    text = plain(str(exc))
    return _relayed(text, what) or _answer(text, what)


def relayed(exc: BaseException | str, what: str | None = None) -> StoreUnavailableError | None:
    """The store-unavailable error a Spark job's failure ``exc`` (or its text) relays from a task,
    or None.

    A task reading a table's files in a Python worker (``streampart/bucket_reads.py``) raised a
    :class:`StoreUnavailableError`, or the store's client's own error (``Error performing GET
    http://…``); the job fails with a Java exception whose text holds the worker's traceback. Only
    those are taken for the store's fault: a Spark failure that merely says "timed out" or
    "Connection refused" may be the cluster's (an executor lost), not the store's.
    """
    text = plain(exc if isinstance(exc, str) else str(exc))
    found = _relayed(text, what)
    if found is None and _REQUEST.search(text) is not None:
        found = _answer(text, what)
    return found


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the errors it was raised ``from``, outermost first (a cycle ends the chain)."""
    chain: list[BaseException] = []
    at: BaseException | None = exc
    while at is not None and all(at is not seen for seen in chain):
        chain.append(at)
        at = at.__cause__
    return chain


def _relayed(text: str, what: str | None) -> StoreUnavailableError | None:
    """An unavailable message of this module's inside ``text`` (another process's), as the error."""
    found = _RELAYED.search(text)
    if found is None:
        return None
    said = found.group("said")
    answered = _ANSWERED.match(said)
    told = (
        answered.group("answered")
        if answered is not None
        else next((no for _, no in _NO_ANSWER if said.startswith(no)), said)
    )
    if what and " while " not in said:
        said += f" while {what}"
    store = found.group("store")
    message = f"the store at {store} is unavailable: it {said}; {_RETRY_HINT}"
    return StoreUnavailableError(message, store=store, answered=told, retry_after=RETRY_AFTER_S)


def _answer(text: str, what: str | None) -> StoreUnavailableError | None:
    """What the store's client says in ``text`` (one line) about a request the store did not serve."""
    lower = text.lower().replace("retry_timeout", "")  # the client's setting, named in every message
    status = _STATUS.search(text)
    answered: str | None = None
    if status is not None:
        reason = " ".join(status.group("reason").split())
        answered = f"{status.group('code')} {reason}".strip()
        code = _S3_CODE.search(text)
        if code is not None:
            answered += f" ({code.group('code')})"
    elif _ANY_STATUS.search(text) is None:  # another status (404, 403, 412) is an answer, not an outage
        answered = next((said for needle, said in _NO_ANSWER if needle in lower), None)
    if answered is None:
        return None
    store = address(text)
    request = _REQUEST.search(text)
    tried = _RETRIES.search(text)
    parts = [f"the store at {store} is unavailable: it {_verb(answered)}"]
    if request is not None:
        parts.append(f" to {request.group('method')} {_key(request.group('url'))}")
    if tried is not None:
        parts.append(f" (after {tried.group('retries')} retries in {_seconds(tried.group('took'))})")
    if what:
        parts.append(f" while {what}")
    parts.append(f"; {_RETRY_HINT}")
    return StoreUnavailableError("".join(parts), store=store, answered=answered, retry_after=RETRY_AFTER_S)


def _seconds(took: str) -> str:
    """``2.246457723s`` or ``688.5ms`` as ``2.2 s`` or ``0.7 s``."""
    value = float(took.rstrip("ms"))
    return f"{value / 1000 if took.endswith('ms') else value:.1f} s"


def _verb(answered: str) -> str:
    return f"answered {answered}" if answered[:1].isdigit() else answered


def _key(url: str) -> str:
    """The object's key of a request URL (``/bucket/key``), shorter than the URL."""
    return urlsplit(url.rstrip(",;:")).path or url


def address(text: str) -> str:
    """The store's address a native library's message names (scheme, host, port), or the
    configured one."""
    request = _REQUEST.search(text)
    if request is not None:
        parts = urlsplit(request.group("url"))
        if parts.scheme and parts.netloc:
            return f"{parts.scheme}://{parts.netloc}"
    from metastore.storage.options import current

    return current().where()


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a native library's panic (pyo3's ``PanicException``, a BaseException)."""
    return type(exc).__name__ == "PanicException"


def panic_error(exc: BaseException, what: str) -> StorageError:
    """One line for a native library's panic while ``what``: its first line, and where to look."""
    first = plain(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    return StorageError(
        f"the store's client failed while {what} ({first}); check the storage settings "
        "(storage.endpoint or AWS_ENDPOINT_URL, storage.region or AWS_REGION)"
    )
