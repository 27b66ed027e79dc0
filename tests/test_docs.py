"""The documentation cannot drift from the code: generated parts, links, and the tests it cites."""

from __future__ import annotations

from pathlib import Path

from streampart.config_reference import GENERATE_COMMAND, reference

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_the_configuration_reference_is_what_the_settings_models_generate() -> None:
    written = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert written == reference(), f"docs/configuration.md is out of date: run {GENERATE_COMMAND}"
