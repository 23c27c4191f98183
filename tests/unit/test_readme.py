"""README's configuration section is generated from config.KEYS and must not drift."""

from __future__ import annotations

import re
from pathlib import Path

from spark_steward.config import KEYS, render_markdown_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_config_table_matches_the_key_table() -> None:
    text = README.read_text()
    match = re.search(r"<!-- config-table:start -->\n(.*?)\n<!-- config-table:end -->", text, re.S)
    assert match, "README lost its config-table markers"
    assert match.group(1) == render_markdown_table(), (
        "README's configuration table is stale: regenerate it with `spark-steward conf --markdown`")


def test_readme_has_exactly_two_setup_commands() -> None:
    text = README.read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", section, re.S)
    assert commands == ['pip install . && python examples/demo.py',
                        'pip install -e ".[test]" && python -m pytest']
    ci = (README.parent / ".ci" / "run").read_text()
    assert commands[1] in ci


def test_every_key_is_documented_in_readme() -> None:
    text = README.read_text()
    for name in KEYS:
        assert f"`{name}`" in text
