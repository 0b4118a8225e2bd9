"""Run the public Open Responses compliance suite against a server and print its results as a table row.

The suite (repository openresponses/openresponses: ``bin/compliance-test.ts``, run with tsx on node) is
third-party code: it is not in this project. Give a copy of it with ``--suite`` (its folder: the one
with ``bin/``, ``src/`` and ``package.json``); it is copied to a temporary folder, where ``npm install``
and ``npx kubb generate`` (its Zod schemas, from the spec's OpenAPI) run once, then the suite runs
against each URL given. COMPATIBILITY.md's "Open Responses" section (docs/open-responses.md) records
the results and the exact commands.

    python scripts/open_responses_suite.py --suite ../shared/open-responses/suite \\
        --server "conformant serve -> llama-server=http://127.0.0.1:8131/v1" --model weather
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_FETCH_TIMEOUT = "extras/no-fetch-timeout.mjs"  # lifts node's 300 s limit on a response's headers


def _prepared(suite: Path, folder: Path) -> Path:
    copy = folder / "suite"
    shutil.copytree(suite, copy, ignore=shutil.ignore_patterns("node_modules", "generated"))
    for command in (["npm", "install", "--no-audit", "--no-fund"], ["npx", "kubb", "generate"]):
        subprocess.run(command, cwd=copy, check=True, stdout=subprocess.DEVNULL)
    return copy


def _run(copy: Path, url: str, model: str, key: str) -> list[dict[str, Any]]:
    env = dict(os.environ)
    if (copy / _FETCH_TIMEOUT).exists():
        env["NODE_OPTIONS"] = f"--import ./{_FETCH_TIMEOUT}"
    command = ["npx", "tsx", "bin/compliance-test.ts", "-u", url, "-k", key, "-m", model, "--json"]
    done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=1800)
    answer = json.loads(done.stdout)
    results = answer if isinstance(answer, list) else answer.get("results", [])
    return [r for r in results if isinstance(r, dict)]


def _row(label: str, results: list[dict[str, Any]]) -> str:
    counts = {s: sum(r.get("status") == s for r in results) for s in ("passed", "failed", "skipped")}
    failed = "; ".join(
        f"`{r.get('id')}`: {' '.join(r.get('errors') or [])[:140]}"
        for r in results
        if r.get("status") == "failed"
    )
    return f"| {label} | {counts['passed']} | {counts['failed']} | {counts['skipped']} | {failed} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--suite", type=Path, required=True, help="a copy of the suite's folder")
    parser.add_argument(
        "--server", action="append", required=True, metavar="LABEL=URL", help="a server's label and /v1 URL"
    )
    parser.add_argument("--model", required=True, help="the model to ask for")
    parser.add_argument("--key", default="any-key", help="the API key sent (default any-key)")
    args = parser.parse_args(argv)
    if not (args.suite / "bin" / "compliance-test.ts").is_file():
        parser.error(f"--suite {args.suite}: no bin/compliance-test.ts there")
    with tempfile.TemporaryDirectory(prefix="open-responses-") as folder:
        copy = _prepared(args.suite, Path(folder))
        print("| server | passed | failed | skipped | failed tests |")
        print("|---|---:|---:|---:|---|")
        for server in args.server:
            label, _, url = server.rpartition("=")
            print(_row(label or url, _run(copy, url, args.model, args.key)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
