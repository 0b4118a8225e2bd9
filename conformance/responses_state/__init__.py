"""The state of ``/v1/responses`` for the proxy and the backend: ``store``, ``previous_response_id``,
``GET``/``DELETE /v1/responses/{id}``, kept in one SQLite file that every worker process shares."""

from .routes import (
    delete_response,
    input_items,
    list_input_items,
    previous_items,
    remember,
    remember_terminal,
    retrieve_response,
)
from .settings import RESPONSES_STORE_SETTINGS, default_store, opened_store, store_of
from .store import ResponseStore, StoredResponse, StoreUnavailable, default_store_path

__all__ = [
    "RESPONSES_STORE_SETTINGS",
    "ResponseStore",
    "StoreUnavailable",
    "StoredResponse",
    "default_store",
    "default_store_path",
    "delete_response",
    "input_items",
    "list_input_items",
    "opened_store",
    "previous_items",
    "remember",
    "remember_terminal",
    "retrieve_response",
    "store_of",
]
