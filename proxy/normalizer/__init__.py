"""Pure normalization of upstream responses to OpenAI's shapes; every repair counted by quirk id."""

from .body import merge_bodies, normalize_body
from .choices import generated_text
from .finish import map_finish_reason
from .identity import Identity, new_id
from .repairs import Repairs
from .stream import StreamNormalizer
from .usage import clean_usage, sum_usage, within_limit

__all__ = [
    "Identity",
    "Repairs",
    "StreamNormalizer",
    "clean_usage",
    "generated_text",
    "map_finish_reason",
    "merge_bodies",
    "new_id",
    "normalize_body",
    "sum_usage",
    "within_limit",
]
