"""The battery of live probes that ``check`` runs: every protocol's own (``probes.py`` in each package of
conformance/protocols/), in the registry's order.

A probe keeps only what its request cannot say (its intent: "this prompt is meant to overflow", see
:mod:`conformance.rules.intents`); everything the request decides (choices for ``n``, usage, stop,
logprobs, echo, whether OpenAI accepts it) the shared judge derives from the request, in ``check`` as in
``validate`` of a recording. Optional features (``n``, prompt arrays, logprobs, echo...) are read from the
request too: a clean 4xx for one is "unsupported", a 5xx an error. Probes ask for few tokens so that a
run against a small CPU model takes seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

from conformance.probe import Probe
from conformance.protocols import PROTOCOLS

__all__ = ["PROBES", "select_probes"]

PROBES: tuple[Probe, ...] = tuple(probe for protocol in PROTOCOLS for probe in protocol.probes)


def select_probes(only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[Probe]:
    """Probes by name; an unknown name is a ``ValueError`` naming the known ones."""
    known = {p.name for p in PROBES}
    unknown = sorted((set(only) | set(skip)) - known)
    if unknown:
        raise ValueError(f"unknown probe {', '.join(unknown)}; known: {', '.join(p.name for p in PROBES)}")
    return [p for p in PROBES if (not only or p.name in only) and p.name not in skip]
