"""The shared core of conformant, imported by the proxy and the backend alike (never the reverse): the wire
model (SSE, JSON, transcripts, schemas, errors, the request model), the wire protocols as front-ends over
the one core (protocols/), and the conformance suite: the judge, its rules, reports, live probes and
replays (docs/architecture.md)."""

from conformance.findings import ERROR, WARNING, Finding, Severity
from conformance.openai_errors import error_body, error_bytes
from conformance.sse import DONE, DONE_EVENT, SSEBlock, SSEParser, encode_comment, encode_data, parse_sse
from conformance.transcript import Transcript, TranscriptError, discover, load_transcript, save_transcript

__all__ = [
    "DONE",
    "DONE_EVENT",
    "ERROR",
    "WARNING",
    "Finding",
    "SSEBlock",
    "SSEParser",
    "Severity",
    "Transcript",
    "TranscriptError",
    "discover",
    "encode_comment",
    "encode_data",
    "error_body",
    "error_bytes",
    "load_transcript",
    "parse_sse",
    "save_transcript",
]
