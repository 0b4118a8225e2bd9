"""The clients are pinned exactly and installed from the lock, and a machine without Node.js skips them
with a message that says so (these need neither Node.js nor a server)."""

from __future__ import annotations

import json
import re

import pytest

from tests.clients import node

NPM = "https://registry.npmjs.org/"


def test_every_client_is_pinned_to_one_version_that_the_lock_holds() -> None:
    wanted = json.loads((node.SOURCE / "package.json").read_text())["dependencies"]
    lock = json.loads((node.SOURCE / "package-lock.json").read_text())
    assert {"openai", "ai", "@ai-sdk/openai-compatible", "@openai/codex"} <= set(wanted)
    assert lock["packages"][""]["dependencies"] == wanted  # the lock was made from this package.json
    for name, version in wanted.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), (name, version)  # no ranges
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
    # Every package fetched is checked against its hash. The lock may name no URL (npm's
    # omit-lockfile-registry-resolved): npm ci then asks the configured registry, a mirror included.
    for path, locked in lock["packages"].items():
        if path:
            assert locked["integrity"].startswith("sha512-"), path
            assert locked.get("resolved", NPM).startswith(NPM), path


def test_without_node_the_client_tests_skip_and_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node.shutil, "which", lambda name: None if name == "node" else f"/usr/bin/{name}")
    with pytest.raises(pytest.skip.Exception, match=r"node not found on PATH: .* need Node\.js 20\+ and npm"):
        node.install()
