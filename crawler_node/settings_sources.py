"""Where settings come from: the TOML config file, CRAWLER_* variables and flags, each value
turned into its field's type, merged (flag > environment > file > default) and validated
into one Settings (crawler_node.settings), with the source of each value for `config --show`.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from crawler_node.settings import DEFAULT_PACE, ENV_PREFIX, PACES, Settings, SettingsError

_FIELDS = {f.name: f for f in fields(Settings)}
_LIST_FIELDS = {"peers", "seeds", "allow_hosts", "ring_weights", "pipelines", "recrawl_hosts", "allow_urls",
                "deny_urls"}


def _coerce(name: str, value: Any, source: str) -> Any:
    """Turn a raw value (a string from env or a TOML value) into the field's type."""
    kind = _FIELDS[name].type
    try:
        if name in _LIST_FIELDS:
            if isinstance(value, Mapping):  # a TOML table: {"GLOB" = "DURATION"} reads as GLOB=DURATION
                return [f"{key}={item}" for key, item in value.items()]
            if isinstance(value, str):
                return [item.strip() for item in value.split(",") if item.strip()]
            return [str(item) for item in value]
        if value is None:
            return None
        if "bool" in kind:
            if isinstance(value, bool):
                return value
            lowered = str(value).strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if "Path" in kind:
            return Path(value)
        if kind.startswith("int"):
            # int(3.7) is 3: a float from TOML is an integer only when it is one
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(f"not an integer: {value!r}")
            return int(value)
        if kind.startswith("float"):
            return float(value)
        return str(value)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{source}: {name}: {exc}") from exc


def load_config_file(path: Path) -> dict[str, Any]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SettingsError(f"config file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"config file {path}: {exc}") from exc
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in _FIELDS:
            raise SettingsError(f"config file {path}: unknown setting {key!r}{_did_you_mean(name)}")
        values[name] = _coerce(name, value, f"config file {path}")
    return values


# CRAWLER_* variables that are not settings and are left alone: the config file's path, the
# test and CI switches (CRAWLER_REQUIRE_*, CRAWLER_TEST_*, and a few named ones, inherited by the
# nodes the tests start), and what Kubernetes puts in every pod for a Service named "crawler"
# (CRAWLER_SERVICE_HOST, CRAWLER_PORT_8080_TCP_ADDR, ...).
_RESERVED_ENV = frozenset({"CONFIG", "DEPLOY_BUILD", "DOCKER_STATE", "DASHBOARD_SCREENSHOT"})
_RESERVED_ENV_PREFIXES = ("REQUIRE_", "TEST_", "SERVICE_", "PORT")


def load_env(env: Mapping[str, str]) -> dict[str, Any]:
    """The settings given as CRAWLER_* variables. Any other CRAWLER_* variable is an error
    with the nearest setting's name: a typo would otherwise be a setting silently not set."""
    values: dict[str, Any] = {}
    for key, raw in env.items():
        if not key.startswith(ENV_PREFIX):
            continue
        suffix = key[len(ENV_PREFIX):]
        name = suffix.lower()
        if name in _FIELDS and suffix == suffix.upper():
            values[name] = _coerce(name, raw, f"environment {key}")
        elif suffix not in _RESERVED_ENV and not suffix.startswith(_RESERVED_ENV_PREFIXES):
            raise SettingsError(f"unknown environment variable {key}{_did_you_mean(name, ENV_PREFIX, upper=True)}")
    return values


def _did_you_mean(name: str, prefix: str = "", *, upper: bool = False) -> str:
    close = difflib.get_close_matches(name, list(_FIELDS), n=1, cutoff=0.6)
    if not close:
        return ""
    guess = close[0].upper() if upper else close[0]
    return f" (did you mean {prefix}{guess}?)"


def load_settings(
    flags: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> Settings:
    """Merge the three sources; ``flags`` holds only options the user actually gave."""
    return load_settings_with_sources(flags, env=env, config_path=config_path)[0]


def load_settings_with_sources(
    flags: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> tuple[Settings, dict[str, str]]:
    """The settings, and where each one that is not its default came from ("flag --x",
    "environment CRAWLER_X", "config file F"): what `crawler-node config --show` prints."""
    env = os.environ if env is None else env
    if config_path is None and env.get(ENV_PREFIX + "CONFIG"):
        config_path = Path(env[ENV_PREFIX + "CONFIG"])
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if config_path is not None:
        from_file = load_config_file(config_path)
        merged.update(from_file)
        sources.update(dict.fromkeys(from_file, f"config file {config_path}"))
    from_env = load_env(env)
    merged.update(from_env)
    sources.update({name: f"environment {ENV_PREFIX}{name.upper()}" for name in from_env})
    for name, value in flags.items():
        if name not in _FIELDS:
            raise SettingsError(f"unknown setting {name!r}")
        option = f"--{name.replace('_', '-')}"
        merged[name] = _coerce(name, value, f"option {option}")
        sources[name] = f"flag {option}"
    # The pace fills what was not set one by one: `--pace adaptive --host-limit-ceiling 4` is
    # adaptive's start and delay with a ceiling of 4.
    pace = merged.get("pace", DEFAULT_PACE)
    for name, value in PACES.get(pace, {}).items():
        if name not in merged:
            merged[name] = value
            if pace != DEFAULT_PACE:
                sources[name] = f"pace {pace}, {sources['pace']}"
    return Settings(**merged).validate(), sources
