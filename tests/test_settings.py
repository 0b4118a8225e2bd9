"""The settings tables (conformance/settings.py) without a process: the flags derived from them read
their ``CONFORMANT_*`` variables, name them in cast errors, show every default in ``--help``, and the
config objects take the same defaults."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest

from backend.config import BACKEND_SETTINGS
from backend.context import ContextOptions, context_options_from_args
from backend.loading import LoadOptions, options_from_args
from conformance.settings import Setting, add_settings, shown_default
from proxy.config import SERVE_SETTINGS, ProxyConfig, proxy_config

TABLES = pytest.mark.parametrize("settings", [SERVE_SETTINGS, BACKEND_SETTINGS], ids=["serve", "backend"])


def _parser(settings: Iterable[Setting[Any]], environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="serve")
    add_settings(parser, settings, environ)
    return parser


def _parse(argv: Sequence[str] = (), **environ: str) -> argparse.Namespace:
    return _parser(SERVE_SETTINGS, environ).parse_args(list(argv))


def _refusal(capsys: pytest.CaptureFixture[str], argv: Sequence[str] = (), **environ: str) -> str:
    with pytest.raises(SystemExit) as exited:
        _parse(argv, **environ)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_a_variable_sets_the_value_cast_as_the_flag_would_be() -> None:
    args = _parse(CONFORMANT_MAX_BODY="5", CONFORMANT_IDLE_TIMEOUT="2.5", CONFORMANT_UPSTREAM_KIND="OpenAI")
    assert (args.max_body, args.idle_timeout, args.upstream_kind) == (5, 2.5, "openai")


def test_the_flag_wins_over_the_variable() -> None:
    assert _parse(["--max-body", "7"], CONFORMANT_MAX_BODY="5").max_body == 7


def test_a_bad_variable_names_itself_and_what_its_text_is_not(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refusal(capsys, CONFORMANT_MAX_FAN_OUT="0")
    assert "'0' is not a positive integer (from the flag or CONFORMANT_MAX_FAN_OUT)" in err
    err = _refusal(capsys, ["--shutdown-timeout", "later"])
    assert "'later' is not a number (from the flag or CONFORMANT_SHUTDOWN_TIMEOUT)" in err


def test_a_bad_variable_of_a_flag_given_anyway_is_not_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert _parse(["--port", "9000"], CONFORMANT_PORT="eighty").port == 9000


def test_a_switch_reads_a_yes_or_a_no_from_its_variable(capsys: pytest.CaptureFixture[str]) -> None:
    assert _parse(CONFORMANT_NO_FAN_OUT="yes").no_fan_out is True
    assert _parse(CONFORMANT_NO_FAN_OUT="0").no_fan_out is False
    assert _parse(["--no-fan-out"], CONFORMANT_NO_FAN_OUT="no").no_fan_out is True
    assert "CONFORMANT_NO_FAN_OUT='maybe' is neither a yes" in _refusal(capsys, CONFORMANT_NO_FAN_OUT="maybe")


def test_repeated_list_flags_replace_the_variables_list() -> None:
    variables = {"CONFORMANT_CORS_ORIGINS": "http://a.example, ,http://b.example"}
    assert _parse(**variables).cors_origins == ("http://a.example", "http://b.example")
    argv = ["--cors-origin", "http://c.example", "--cors-origin", "http://d.example"]
    assert _parse(argv, **variables).cors_origins == ("http://c.example", "http://d.example")
    assert _parse().cors_origins == ()


@TABLES
def test_help_shows_every_flag_with_its_help_default_and_variable(settings: tuple[Setting[Any], ...]) -> None:
    parser = _parser(settings, {})
    actions = {action.dest: action for action in parser._actions if action.dest != "help"}
    assert set(actions) == {setting.name for setting in settings}
    help_text = " ".join(parser.format_help().split())  # argparse wraps lines
    for setting in settings:
        assert actions[setting.name].help, setting.name
        assert f"(default: {shown_default(setting)}; {setting.variable})" in help_text


def test_help_shows_the_tables_default_even_when_a_variable_is_set() -> None:
    help_text = " ".join(_parser(SERVE_SETTINGS, {"CONFORMANT_PORT": "9"}).format_help().split())
    assert "(default: 8000; CONFORMANT_PORT)" in help_text


def test_the_proxy_config_of_no_flags_is_the_config_of_its_defaults() -> None:
    assert proxy_config(_parse(), upstream="http://u") == ProxyConfig(upstream="http://u")
    assert proxy_config(
        _parse(["--no-fan-out", "--client-timeout", "3"]), upstream="http://u"
    ) == ProxyConfig(upstream="http://u", fan_out=False, client_timeout=3.0)


def test_the_variables_are_the_flags_names_in_capitals() -> None:
    """The rule docs/proxy.md states (``CONFORMANT_<FLAG>``), with the one list variable in the plural."""
    for setting in SERVE_SETTINGS:
        expected = "CONFORMANT_" + re.sub("-", "_", setting.option.removeprefix("--")).upper()
        assert setting.variable == expected or setting.variable == expected + "S", setting.name


def test_the_backend_reads_its_variables_into_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser(BACKEND_SETTINGS, {})
    defaults = parser.parse_args([])
    assert (context_options_from_args(defaults), options_from_args(defaults)) == (
        ContextOptions(),
        LoadOptions(),
    )
    environ = {
        "CONFORMANT_CTX_SIZE": "2048",
        "CONFORMANT_BATCH_INVARIANT": "on",
        "CONFORMANT_N_GPU_LAYERS": "all",
        "CONFORMANT_OVERRIDE_TENSOR": "exps=CPU,norm=CPU",
        "CONFORMANT_QUEUE_SIZE": "0",
    }
    args = _parser(BACKEND_SETTINGS, environ).parse_args(["-ngl", "3"])
    context, load = context_options_from_args(args), options_from_args(args)
    assert (context.ctx_size, context.batch_invariant, args.queue_size) == (2048, True, 0)
    assert (load.n_gpu_layers, load.override_tensor) == (3, ["exps=CPU,norm=CPU"])
    with pytest.raises(SystemExit):
        _parser(BACKEND_SETTINGS, {"CONFORMANT_QUEUE_SIZE": "-1"}).parse_args([])
    assert (
        "'-1' is not a non-negative integer (from the flag or CONFORMANT_QUEUE_SIZE)"
        in capsys.readouterr().err
    )
