"""Real JavaScript clients for the tests in this folder: Node.js with the npm packages that js/package.json
pins (openai-node, the Vercel AI SDK, Codex CLI), installed by ``npm ci`` from js/package-lock.json.

Where they are installed: ``CONFORMANT_CLIENTS_JS_DIR`` (the clients tox env sets it to a folder of its
own, so the repo tree gets no node_modules), else js/ itself (its node_modules is gitignored). The lock's
hash is stamped into node_modules after an install, so a later run with the same lock installs nothing
(``npm ci`` would delete and refetch 480 MB, the Codex binary being 424 MB of it).

Without ``node`` or ``npm`` on PATH, or with a Node.js older than the clients need, every test here is
skipped with a message that says so: the rest of the project needs no Node.js. An ``npm ci`` that fails
where npm exists is a failure, not a skip (a lock that no longer installs must be seen).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SOURCE = Path(__file__).resolve().parent / "js"
DIR_VARIABLE = "CONFORMANT_CLIENTS_JS_DIR"
MIN_NODE = 20
"""The oldest Node.js these tests run on (CI's). openai 7 and ai 7 declare ``node >= 22`` in ``engines``
(npm ci warns EBADENGINE) but run on Node.js 20, which these tests prove on every run."""
_STAMP = ".conformant-lock.sha256"


@dataclass(frozen=True)
class NodeClients:
    """Node.js and the folder where the pinned clients and this folder's scripts are installed."""

    node: str
    root: Path

    def run(self, script: str, spec: dict[str, Any], *, timeout: float = 300) -> dict[str, Any]:
        """Run js/``script`` with ``spec`` as its one JSON argument; its last stdout line, read as JSON.

        The scripts print ``{"error": ...}`` and exit 1 when the client raises: that dict is returned
        too, for the test to show. Anything else (a crash, no JSON) fails here with node's stderr."""
        run = subprocess.run(
            [self.node, str(self.root / script), json.dumps(spec)],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        lines = run.stdout.strip().splitlines()
        try:
            answer = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            output = f"{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
            pytest.fail(f"{script} exited {run.returncode} without a JSON line:\n{output}")
        assert isinstance(answer, dict)
        return answer

    def bin(self, package: str, script: str) -> list[str]:
        """The command line that runs an installed package's bin script under this Node.js."""
        return [self.node, str(self.root / "node_modules" / package / script)]


def _node_major(node: str) -> int:
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    found = re.match(r"v(\d+)\.", version.strip())
    return int(found.group(1)) if found else 0


def install() -> NodeClients:
    """The pinned clients, installed once per lock; skips the calling test where Node.js is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(name for name, path in (("node", node), ("npm", npm)) if path is None)
        needed = f"the JavaScript client tests need Node.js {MIN_NODE}+ and npm"
        pytest.skip(f"{missing} not found on PATH: {needed}")
    major = _node_major(node)
    if major < MIN_NODE:
        pytest.skip(f"Node.js {major} found; the JavaScript client tests need Node.js {MIN_NODE}+")
    root = Path(os.environ.get(DIR_VARIABLE) or SOURCE).resolve()
    if root != SOURCE:
        root.mkdir(parents=True, exist_ok=True)
        for source in [SOURCE / "package.json", SOURCE / "package-lock.json", *SOURCE.glob("*.mjs")]:
            shutil.copyfile(source, root / source.name)
    lock = hashlib.sha256((SOURCE / "package-lock.json").read_bytes()).hexdigest()
    stamp = root / "node_modules" / _STAMP
    if not stamp.is_file() or stamp.read_text().strip() != lock:
        # --ignore-scripts: none of the pinned packages needs an install script (Codex's binary is an
        # optional dependency per platform), and none gets to run one.
        args = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
        done = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            output = f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            pytest.fail(f"npm ci in {root} exited {done.returncode}:\n{output}")
        stamp.write_text(lock + "\n")
    return NodeClients(node, root)
