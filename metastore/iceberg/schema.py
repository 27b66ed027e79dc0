"""A Delta schema as an Iceberg schema: the same columns, with field ids, and the time partition.

Field ids are the columns' places in the Delta schema (1, 2, …, partition column included). A
streampart table's columns are only ever added at the end or widened in place, never dropped,
renamed or moved, so a column keeps its id in every version, and every Iceberg schema of a table
agrees with every other on the ids they share.

streampart's data files carry no Iceberg field ids: the table's default *name mapping*
(``schema.name-mapping.default``) maps each column's name to its id, as Iceberg's own import of
Parquet files does. The partition column is not in the files (a Delta partition column lives in the
log); its values come from each file's partition in the manifest (an identity partition).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import create_mapping_from_schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from metastore.errors import TableIntegrityError
from metastore.models import ARRIVAL_COLUMN

NAME_MAPPING = "schema.name-mapping.default"
HIDDEN_COLUMNS = (ARRIVAL_COLUMN,)
HIDDEN_FIELD_ID = 1_000_000  # far above any column's id (a column's id is its place in the schema)
PARTITION_FIELD_ID = 1000  # Iceberg numbers partition fields from 1000

_TYPES: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "byte": IntegerType(),  # Iceberg has no 8- or 16-bit integers: read as int
    "short": IntegerType(),
    "integer": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "binary": BinaryType(),
    "date": DateType(),
    "timestamp": TimestamptzType(),
    "timestamp_ntz": TimestampType(),
}


def iceberg_type(delta_type: Any, where: str) -> IcebergType:
    """The Iceberg type of a Delta type streampart writes."""
    if isinstance(delta_type, str):
        if delta_type.startswith("decimal("):
            precision, scale = delta_type[len("decimal(") : -1].split(",")
            return DecimalType(int(precision), int(scale))
        found = _TYPES.get(delta_type)
        if found is not None:
            return found
    raise TableIntegrityError(f"{where}: Delta type {json.dumps(delta_type)} has no Iceberg type here")


@dataclass(frozen=True)
class IcebergSchema:
    """One Delta schema as Iceberg sees it; ``fingerprint`` tells two schemas apart."""

    schema: Schema  # its schema id is left 0: the table's metadata numbers its schemas
    spec: PartitionSpec
    fingerprint: str

    def with_id(self, schema_id: int) -> Schema:
        return Schema(*self.schema.fields, schema_id=schema_id)

    def field_id(self, name: str) -> int:
        return self.schema.find_field(name).field_id

    def name_mapping_json(self) -> str:
        """The default name mapping: each column's name to its id, and the columns streampart keeps in
        files beside the table's (a keyed table's arrival) to ids no schema has, so a reader maps every
        column of a file and leaves those out."""
        mapping = json.loads(create_mapping_from_schema(self.schema).model_dump_json())
        mapping += [{"field-id": HIDDEN_FIELD_ID + i, "names": [n]} for i, n in enumerate(HIDDEN_COLUMNS)]
        return json.dumps(mapping)


def from_delta(fields: Sequence[dict[str, Any]], partition_column: str, where: str) -> IcebergSchema:
    """``fields`` (a Delta ``schemaString``'s, in order) as an Iceberg schema partitioned by identity
    on ``partition_column``."""
    nested = [
        NestedField(
            field_id=i,
            name=f["name"],
            field_type=iceberg_type(f["type"], f"{where}: column {f['name']!r}"),
            required=not f.get("nullable", True),
        )
        for i, f in enumerate(fields, start=1)
    ]
    schema = Schema(*nested)
    source = schema.find_field(partition_column).field_id
    spec = PartitionSpec(
        PartitionField(
            source_id=source,
            field_id=PARTITION_FIELD_ID,
            transform=IdentityTransform(),
            name=partition_column,
        ),
        spec_id=0,
    )
    text = json.dumps([(f.field_id, f.name, str(f.field_type), f.required) for f in nested])
    return IcebergSchema(schema, spec, hashlib.sha256(text.encode()).hexdigest()[:16])
