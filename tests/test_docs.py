"""The documentation cannot drift from the code: generated parts, links, and the tests it cites."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from streampart.config_reference import GENERATE_COMMAND, reference

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_the_configuration_reference_is_what_the_settings_models_generate() -> None:
    written = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert written == reference(), f"docs/configuration.md is out of date: run {GENERATE_COMMAND}"


def _markdown() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_test_the_docs_name_exists() -> None:
    cited = [
        (doc.name, m["file"], m["test"])
        for doc in _markdown()
        for m in re.finditer(r"(?P<file>tests/[\w/]+\.py)::(?P<test>\w+)", doc.read_text(encoding="utf-8"))
    ]
    assert len(cited) >= 12, "docs/invariants.md names the tests of each invariant"
    missing = [
        f"{doc}: {file}::{test}"
        for doc, file, test in cited
        if not (ROOT / file).is_file() or test not in _test_functions(ROOT / file)
    ]
    assert missing == [], "the docs name tests that do not exist"


def test_every_relative_link_of_the_docs_leads_to_a_file_of_the_repository() -> None:
    broken = []
    for doc in _markdown():
        text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL, or an anchor on the same page
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve()
            if not path.exists() or not path.is_relative_to(ROOT):
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == [], "links to files a clone does not have"


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub makes of a Markdown file's headings (lower case, punctuation dropped)."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_source_file_the_docs_name_exists() -> None:
    """Architecture and operations name modules (`metastore/store/engine.py`): moved code fails here."""
    named = {
        (doc.name, path)
        for doc in DOCS.glob("*.md")
        for path in re.findall(
            r"`((?:metastore|ingest|scheduler|streampart|tests|docker|conf|bench)/[\w./]*)`",
            doc.read_text(encoding="utf-8"),
        )
    }
    assert len(named) >= 20
    assert sorted(f"{doc}: {path}" for doc, path in named if not (ROOT / path).exists()) == []


def test_the_generated_references_are_what_the_code_generates() -> None:
    """docs/reference/: the CLI from its typer app, the HTTP API from its OpenAPI description."""
    from streampart.reference_docs import GENERATE_COMMAND as REFERENCES
    from streampart.reference_docs import references

    for path, text in references().items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is out of date: run {REFERENCES}"
