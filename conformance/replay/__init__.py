"""Recorded servers for testing clients: replay transcripts as a fake OpenAI-compatible upstream."""

from conformance.replay.app import create_replay_app
from conformance.replay.corpus import corpus_dir, load_corpus
from conformance.replay.matching import TRANSCRIPT_HEADER, request_key, transcript_stem

__all__ = [
    "TRANSCRIPT_HEADER",
    "corpus_dir",
    "create_replay_app",
    "load_corpus",
    "request_key",
    "transcript_stem",
]
