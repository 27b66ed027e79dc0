"""A table's Delta log schedule: the values it takes, refuses, and reads back from its log."""

from __future__ import annotations

from datetime import timedelta

import pytest

from metastore.delta.checkpoints import (
    LogSettings,
    check_checkpoint_interval,
    check_log_retention,
    delta_interval,
    log_settings,
    parse_delta_interval,
    set_log_settings,
)
from metastore.errors import UserInputError
from tests.fixtures import make_table


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("interval 30 days", timedelta(days=30)),  # Delta's own default, as Spark writes it
        ("interval 1 hour", timedelta(hours=1)),
        ("interval 3600 seconds", timedelta(hours=1)),  # as streampart writes it
        ("2 weeks", timedelta(weeks=2)),
    ],
)
def test_delta_intervals_read_back(text: str, expected: timedelta) -> None:
    assert parse_delta_interval(text) == expected
    assert parse_delta_interval(delta_interval(expected)) == expected


@pytest.mark.parametrize("text", ["", "30 days ago", "interval x days", "interval 3 fortnights"])
def test_what_is_not_a_delta_interval(text: str) -> None:
    with pytest.raises(ValueError):
        parse_delta_interval(text)


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        (lambda: check_checkpoint_interval(0), ["--checkpoint-interval", "from 1", "not 0"]),
        (lambda: check_checkpoint_interval(10**6), ["--checkpoint-interval", "not 1000000"]),
        (lambda: check_log_retention("10m"), ["--log-retention", "at least 1h", "not 10m"]),
        (lambda: check_log_retention("soon"), ["--log-retention", "soon"]),
    ],
)
def test_bad_values_name_the_option(call, fragments: list[str]) -> None:
    with pytest.raises(UserInputError) as err:
        call()
    for fragment in fragments:
        assert fragment in str(err.value)


def test_the_schedule_lives_in_the_tables_delta_log(catalog) -> None:
    table = make_table(catalog)
    assert log_settings(catalog.load(table)) == LogSettings(100, timedelta(days=30))
    set_log_settings(catalog.load(table), log_retention=timedelta(days=2))
    set_log_settings(catalog.load(table), checkpoint_interval=7)  # the other one stays
    dt = catalog.load(table)
    assert log_settings(dt) == LogSettings(7, timedelta(days=2))
    assert dt.metadata().configuration["delta.logRetentionDuration"] == "interval 172800 seconds"
    # a value another writer left that streampart cannot read: Delta's default, not a failure
    dt.alter.set_table_properties({"delta.checkpointInterval": "often"}, raise_if_not_exists=False)
    assert log_settings(catalog.load(table)).checkpoint_interval == 100
