"""An answer in the shape the client asked for, when the upstream sent the other one (seed 002): a stream's
chunks aggregated into one body (``stream: false`` to an upstream that only streams), and a whole body's
chunks synthesized into a stream (``stream: true`` to one that answers whole)."""

from .aggregate import Aggregator
from .synthesize import synthesize_chunks

__all__ = ["Aggregator", "synthesize_chunks"]
