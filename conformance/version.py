"""The installed conformant's version, as ``--version`` and the reports (their ``conformant`` field)
give it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["installed_version"]


def installed_version() -> str:
    """The distribution's version; ``0+unknown`` when run from a checkout that is not installed."""
    try:
        return version("conformant")
    except PackageNotFoundError:
        return "0+unknown"
