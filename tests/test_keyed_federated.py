"""A keyed table in a federation: its key, arrivals, rolls and kept deletes live with its namespace's
metastore (the contract suites' routed catalog: one metastore, or four through the router)."""

from __future__ import annotations

import random

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from scheduler.roll import Roller
from tests.fixtures import routed_catalog  # noqa: F401  (the fixture ``catalog``: single and federated)
from tests.test_keyed import Truth, change_log, jsonl, keyed_table, read_now


def test_a_keyed_table_in_a_federated_metastore_keeps_one_row_per_key(catalog) -> None:
    table = keyed_table(catalog, "ns.kv", sequence=True)
    writer = ChunkWriter(catalog, table)
    truth = Truth(True)
    for step, chunk in enumerate(change_log(random.Random(31), 12, 6)):
        writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)
        assert read_now(catalog, table) == truth.live(), f"after chunk {step}"
        if step % 4 == 3:
            Roller(catalog).roll_table(table, force=True)
    assert read_now(catalog, table) == truth.live()
    assert catalog.table("ns.kv").keys == table.keys
