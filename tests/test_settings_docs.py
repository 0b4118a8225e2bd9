"""The docs' flag tables match the settings tables they describe: the same flags in the same order, each
with its short forms, its ``CONFORMANT_*`` variable and the default ``--help`` shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from backend.config import CONTEXT_SETTINGS, LOAD_SETTINGS, SERVER_SETTINGS
from conformance.settings import Setting, shown_default
from proxy.config import SERVE_SETTINGS

DOCS = Path(__file__).resolve().parent.parent / "docs"
HEADER = "| flag | env | default | meaning |"


def _rows(page: str) -> list[list[str]]:
    """The cells of the rows of the page's one flag table (``\\|`` inside a cell is no separator)."""
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    assert lines.count(HEADER) == 1, f"{page} has no single flag table"
    rows = []
    for line in lines[lines.index(HEADER) + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


@pytest.mark.parametrize(
    ("page", "settings"),
    [
        ("proxy.md", SERVE_SETTINGS),
        ("backend.md", SERVER_SETTINGS + CONTEXT_SETTINGS),
        ("models.md", LOAD_SETTINGS),
    ],
)
def test_the_docs_flag_table_is_the_settings_table(page: str, settings: tuple[Setting[Any], ...]) -> None:
    rows = _rows(page)
    assert [re.findall(r"`(--[a-z-]+)", flag)[0] for flag, *_ in rows] == [s.option for s in settings]
    for (flag, env, default, meaning), setting in zip(rows, settings, strict=True):
        assert re.findall(r"`(-[a-z]+)\b", flag) == list(setting.aliases), setting.option
        assert re.findall(r"`(CONFORMANT_[A-Z_]+)`", env) == [setting.variable], setting.option
        assert default.replace("`", "") == shown_default(setting), setting.option
        assert meaning, setting.option
