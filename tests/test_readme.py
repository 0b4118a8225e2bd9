"""The README's first commands are a newcomer's first run (issue 18 item 18): they make a virtualenv on
the Python version the package requires, show the llama.cpp build's progress, and say what the bundled
model is before anyone asks it a question."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _first_commands() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", README, re.DOTALL)
    assert block is not None
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]


def test_the_first_commands_make_a_virtualenv_on_the_required_python() -> None:
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    version = required.removeprefix(">=")
    commands = _first_commands()
    assert f"Python {version} or newer" in README.split("**conformant makes")[0]
    serve, test = commands[0], commands[1]
    for command in (serve, test):
        # Each of the two opening commands makes and enters the virtualenv before it installs.
        assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install")
    assert 'pip install -v ".[backend]"' in serve  # the llama.cpp build shows its progress
    assert serve.endswith("conformant serve")
    assert test.endswith("tox")


def test_the_bundled_model_is_introduced_as_a_base_model() -> None:
    introduction = README.split("**conformant makes")[0]
    assert "Gemma 3 270M" in introduction
    assert re.search(r"\bbase\W+model\b", introduction)  # ("a **base\nmodel**")
    assert "--model" in introduction  # and how to bring a model that answers


def test_ci_runs_the_readme_test_command() -> None:
    """CI runs what the README tells a newcomer to run, not a variant of it (pip's --quiet aside)."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert _first_commands()[1].replace("pip install", "pip install --quiet") in ci
