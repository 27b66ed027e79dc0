"""Errors of the ingest path (chunk protocol, parsing, the Kafka source and ingest job, the dev broker)."""

from __future__ import annotations

from metastore.errors import RetriableError, StreampartError, UserInputError


class IngestError(StreampartError):
    """Root of the ingest package's errors."""


class MalformedChunkError(IngestError, UserInputError):
    """A chunk's content does not fit the table: names the record (line/row) and the fault."""


class LateDataError(IngestError, UserInputError):
    """Rows belong to a sealed event-time partition and the table rejects late data."""


class IdempotencyConflictError(IngestError, UserInputError):
    """An idempotency key already names a chunk of different content: new data needs a new key."""


class ChunkStateError(IngestError):
    """The chunk cannot do that in its state (commit an aborted chunk, abort a committed one)."""


class ChunkBusyError(IngestError, RetriableError):
    """Another attempt is committing this chunk right now; retry after it finishes or times out."""


class CommitTimeoutError(IngestError, RetriableError):
    """The commit did not land before its deadline; retrying with the same idempotency key resolves it."""


class ApiClientError(IngestError):
    """An error answer of the HTTP API, as the Python client (:mod:`ingest.client`) raises it."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None,
                 field: str | None = None, line: int | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.code, self.field, self.line = status, code, field, line


class ApiRequestError(ApiClientError, UserInputError):
    """The server refused the request (4xx): bad input, unknown table or chunk, auth, state."""


class ApiUnavailableError(ApiClientError, RetriableError):
    """The server could not be reached or stayed unavailable (5xx) for as long as the client retried."""


class IngestQueryError(IngestError):
    """The Kafka ingest job's streaming query stopped with an error (its message says which batch and why)."""


class KafkaSourceError(IngestError):
    """Root of the Kafka source's errors."""


class KafkaConfigError(KafkaSourceError, UserInputError):
    """An option of the source is missing or invalid; the message names the option."""


class KafkaUnavailableError(KafkaSourceError, RetriableError):
    """The brokers did not answer after the bounded retries; the message names them."""


class KafkaReadTimeoutError(KafkaSourceError, RetriableError):
    """An executor made no progress reading its offset range within ``kafkaConsumer.pollTimeoutMs``."""


class KafkaDataLossError(KafkaSourceError):
    """Offsets that should be read no longer exist (retention, topic deleted/re-created)."""


class BrokerError(IngestError):
    """The development broker (:mod:`ingest.kafka.devbroker`) could not be found, started or reached."""


class StopRequestedError(IngestError):
    """A streaming batch refused to start because its job is stopping (the next run replays it)."""


class SchemaRegistryUnavailableError(KafkaSourceError, RetriableError):
    """The Schema Registry did not answer (or refused the credentials) after the bounded retries."""

    fails_batch = True  # never a record's fault: the batch fails and is replayed, nothing is dead-lettered
