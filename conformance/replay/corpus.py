"""The quirk corpus shipped in the package: transcripts of real server deviations, ready to replay."""

from __future__ import annotations

from importlib.resources import as_file, files

from conformance.transcript import Transcript, discover

__all__ = ["corpus_dir", "load_corpus"]


def corpus_dir() -> str:
    """Where the shipped corpus lies (a real folder: the wheel installs package data as files)."""
    with as_file(files("conformance") / "corpus") as path:
        return str(path)


def load_corpus() -> list[Transcript]:
    return discover([corpus_dir()])
