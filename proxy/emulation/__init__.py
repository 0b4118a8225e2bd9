"""What the upstream lacks, the proxy supplies: aggregation, synthesized streams, stop sequences, fan-out."""

from .aggregate import Aggregator
from .stop import StopScanner, truncate_at_stop
from .synthesize import synthesize_chunks

__all__ = ["Aggregator", "StopScanner", "synthesize_chunks", "truncate_at_stop"]
