"""Runs the Delta Sharing client (``delta-sharing``, in its own virtualenv: .venv-sharing) for a test.

Not imported by the suite: ``tests/catalogs/test_sharing.py`` runs it with .venv-sharing's Python,
giving a JSON list of steps as its one argument; it prints one JSON answer per step. A load or
changes step writes its frame to a Parquet file the test reads back. A step that fails answers
``{"error": <message>, "status": <HTTP status or null>}``.
"""

import json
import os
import sys

import delta_sharing
import pyarrow as pa
import pyarrow.parquet as pq
import requests


def run(step: dict) -> object:
    op = step["op"]
    profile = step["profile"]
    client = delta_sharing.SharingClient(profile)
    if op == "shares":
        return sorted(s.name for s in client.list_shares())
    if op == "all_tables":
        return sorted(f"{t.share}.{t.schema}.{t.name}" for t in client.list_all_tables())
    if op == "schemas":
        return sorted(s.name for s in client.list_schemas(delta_sharing.Share(step["share"])))
    url = f"{profile}#{step['table']}"
    if op == "load":
        kw = {k: step[k] for k in ("limit", "version", "timestamp", "jsonPredicateHints") if k in step}
        frame = delta_sharing.load_as_pandas(url, **kw)
    elif op == "changes":
        kw = {k: step[k] for k in ("starting_version", "ending_version", "starting_timestamp") if k in step}
        frame = delta_sharing.load_table_changes_as_pandas(url, **kw)
    elif op == "version":
        return delta_sharing.get_table_version(url)
    else:
        raise ValueError(op)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), step["out"])
    return {"rows": len(frame), "columns": list(frame.columns)}


def main() -> None:
    answers = []
    for step in json.loads(sys.argv[1]):
        try:
            answers.append(run(step))
        except requests.HTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            answers.append({"error": str(exc), "status": status})
        except Exception as exc:
            answers.append({"error": f"{type(exc).__name__}: {exc}", "status": None})
    print(json.dumps(answers))
    # Past its answers, the process ends without native libraries' exit steps: Arrow's C++ thread
    # pools can abort it there ("terminate called without an active exception", status -6;
    # apache/arrow#34314), failing a test whose client did all it was asked.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
