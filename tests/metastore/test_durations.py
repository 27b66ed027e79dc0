"""One duration grammar everywhere: table DDL, settings, environment variables, Python callers."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ingest.api.config import ServerConfig
from ingest.config import ChunkConfig
from ingest.kafka.job import KafkaIngestOptions
from metastore.durations import format_duration, parse_duration
from metastore.errors import UserInputError
from scheduler.config import RollConfig, SchedulerConfig
from streampart.config import load_settings


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("15m", timedelta(minutes=15)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d", timedelta(days=1)),
        ("90s", timedelta(seconds=90)),
        (" 2H ", timedelta(hours=2)),
        ("0s", timedelta(0)),
        ("500ms", timedelta(milliseconds=500)),
        ("1.5h", timedelta(minutes=90)),
        ("3600", timedelta(hours=1)),
        ("2.5", timedelta(seconds=2.5)),
        ("PT1H", timedelta(hours=1)),
        ("P1DT12H", timedelta(days=1, hours=12)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "  ", "abc", "1x", "h1", "1h 30m", "1h30", "P1X", "1..5h", "inf"])
def test_parse_duration_errors(text: str) -> None:
    with pytest.raises(UserInputError, match="--roll-every") as info:
        parse_duration(text, "--roll-every")
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("value", ["-5m", -1, timedelta(seconds=-1)])
def test_a_negative_duration_is_refused(value: str | float | timedelta) -> None:
    with pytest.raises(UserInputError, match=r"negative"):
        parse_duration(value, "--lateness")


@pytest.mark.parametrize("text", ["36501d", "1" * 5000 + "s", "99999999999999999999h", "1e400"])
def test_parse_duration_names_a_value_too_large(text: str) -> None:
    with pytest.raises(UserInputError, match=r"--roll-every '.*' is (too long|not a duration)"):
        parse_duration(text, "--roll-every")
    assert parse_duration("36500d") == timedelta(days=36500)


@pytest.mark.parametrize(
    "delta", [timedelta(0), timedelta(hours=1, minutes=30), timedelta(milliseconds=250), timedelta(days=3)]
)
def test_format_duration_reads_back(delta: timedelta) -> None:
    assert parse_duration(format_duration(delta)) == delta


# Issue 9: each of these was refused although conf/streampart.toml promises the forms.
def test_every_config_model_takes_every_form() -> None:
    assert ChunkConfig(ttl="1h").ttl == timedelta(hours=1)
    assert ChunkConfig(commit_timeout=30).commit_timeout == timedelta(seconds=30)
    assert RollConfig(lease="10m").lease == timedelta(minutes=10)
    assert SchedulerConfig(lease_ttl="PT30S").lease_ttl == timedelta(seconds=30)
    assert ServerConfig(header_timeout="1.5s").header_timeout == timedelta(seconds=1.5)
    options = KafkaIngestOptions(table="a.b", bootstrap="h:1", topic="t", trigger="500ms")
    assert options.trigger == timedelta(milliseconds=500)


def test_environment_variables_take_plain_seconds_and_units(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMPART_CONFIG", "")
    monkeypatch.setenv("STREAMPART_CHUNK__TTL", "3600")
    monkeypatch.setenv("STREAMPART_ROLL__LEASE", "10m")
    settings = load_settings()
    assert (settings.chunk.ttl, settings.roll.lease) == (timedelta(hours=1), timedelta(minutes=10))


def test_a_bad_duration_setting_names_its_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMPART_CONFIG", "")
    monkeypatch.setenv("STREAMPART_CHUNK__TTL", "soon")
    with pytest.raises(UserInputError, match=r"chunk\.ttl: .*'soon' is not a duration"):
        load_settings()


def test_settings_are_written_back_in_the_same_grammar() -> None:
    dumped = ChunkConfig().model_dump(mode="json")
    assert dumped["ttl"] == "1h" and ChunkConfig(**dumped) == ChunkConfig()
