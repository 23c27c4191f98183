"""README.md and docs/ must not drift from the code: the configuration table is generated from
config.KEYS, the set-up commands are the ones CI runs, every key and public name is documented,
the README stays short and every relative link resolves."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from urllib.parse import unquote

from spark_steward.config import KEYS, render_markdown_table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
PACKAGE_INIT = ROOT / "python" / "spark_steward" / "__init__.py"

README_MAX_LINES = 300


def doc_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def test_configuration_doc_table_matches_the_key_table() -> None:
    text = CONFIGURATION.read_text()
    match = re.search(r"<!-- config-table:start -->\n(.*?)\n<!-- config-table:end -->", text, re.S)
    assert match, "docs/configuration.md lost its config-table markers"
    assert match.group(1) == render_markdown_table(), (
        "docs/configuration.md's table is stale: regenerate it with `spark-steward conf --markdown`")


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_second() -> None:
    text = README.read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", section, re.S)
    assert commands == ['pip install . && python examples/demo.py',
                        'pip install -e ".[test]" && python -m pytest']
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci


def test_every_key_is_documented_in_the_configuration_doc() -> None:
    text = CONFIGURATION.read_text()
    missing = [name for name in KEYS if f"`{name}`" not in text]
    assert not missing, f"keys not documented in docs/configuration.md: {missing}"


def test_readme_is_at_most_300_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; move reference material into docs/")


def _without_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _without_code(text: str) -> str:
    """Markdown without fenced blocks and inline code spans, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", _without_fences(text))


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a page: lower case, punctuation dropped, spaces to hyphens."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#* *$", _without_fences(page.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def test_every_relative_link_in_readme_and_docs_resolves() -> None:
    broken = []
    for page in [README, *doc_pages()]:
        text = _without_code(page.read_text())
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            linked = (page.parent / unquote(path_part)).resolve() if path_part else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_public_name_is_documented_in_docs() -> None:
    tree = ast.parse(PACKAGE_INIT.read_text())
    public = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets))
    assert public, "spark_steward.__all__ is empty"
    docs = "\n".join(page.read_text() for page in doc_pages())
    missing = [name for name in public if f"spark_steward.{name}" not in docs]
    assert not missing, f"public names no docs page mentions: {missing}"
