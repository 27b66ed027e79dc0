"""The guides keep the convention of tests/walkthrough.py, and every guide with commands is walked."""

from __future__ import annotations

import pytest

from tests.guides.guides import GUIDES, runnable
from tests.walkthrough import PLACEHOLDERS, ROOT, commands, problems, section


def test_every_guide_with_commands_is_walked() -> None:
    guides = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guides").glob("*.md"))
    assert [g for g in guides if runnable(g) and g not in GUIDES] == []


@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_the_convention_is_kept(guide: str) -> None:
    """Every command is runnable or says why not, and says its exit status when it fails."""
    assert problems(commands([section(guide)], {})) == []


def test_every_placeholder_is_still_used() -> None:
    text = "\n".join(section(name)[2] for name in [*GUIDES, "README.md"])
    assert [p for p in PLACEHOLDERS if p not in text] == []
