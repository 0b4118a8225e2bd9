"""The conformance suite: the wire model (SSE codec, transcripts), schemas, stream rules and reports."""

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
