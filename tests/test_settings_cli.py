"""Settings an operator can find and cannot get wrong silently: every option has help with its
default, in groups; `config --show` says each value and where it came from; an unknown
CRAWLER_* variable or config key is an error that names the setting meant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crawler_node.cli import build_parser
from crawler_node.settings import SettingsError, settings_fields
from crawler_node.settings_help import GROUPS, HELP, HIDDEN
from crawler_node.settings_sources import load_settings


def crawler_node(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("CRAWLER_")}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "crawler_node", *args], capture_output=True, text=True,
                          timeout=60, env=environment, cwd=cwd)


def test_every_setting_has_help_and_a_group() -> None:
    names = {field.name for field in settings_fields()} - HIDDEN
    grouped = [name for members in GROUPS.values() for name in members]
    assert names == set(HELP) == set(grouped) and len(grouped) == len(set(grouped))
    build_parser()
    help_text = crawler_node("run", "--help").stdout
    assert "tuning: " not in help_text  # the placeholder the options without help once had
    for title in GROUPS:
        assert f"\n{title}:\n" in help_text
    assert "--fetch-timeout-s FETCH_TIMEOUT_S" in help_text and "(default 30.0)" in help_text


def test_an_unknown_variable_is_an_error_that_names_the_setting_meant(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"CRAWLER_MAX_DEPT \(did you mean CRAWLER_MAX_DEPTH\?\)"):
        load_settings({}, env={"CRAWLER_MAX_DEPT": "3"})
    # Not settings, and left alone: the CI's switches and what Kubernetes sets for a Service "crawler".
    load_settings({}, env={"CRAWLER_REQUIRE_PROMTOOL": "1", "CRAWLER_SERVICE_HOST": "10.0.0.1",
                           "CRAWLER_PORT_8080_TCP_ADDR": "10.0.0.1", "CRAWLER_TEST_X": "y"})
    run = crawler_node("run", "--data-dir", str(tmp_path / "d"), env={"CRAWLER_GLOBAL_INFLIHGT": "8"})
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "crawler-node run: error: unknown environment variable CRAWLER_GLOBAL_INFLIHGT "
        "(did you mean CRAWLER_GLOBAL_INFLIGHT?)"]


def test_an_unknown_config_key_or_a_wrong_type_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text('fetch-timeout = 3\n')
    run = crawler_node("run", "--config", str(config), "--data-dir", str(tmp_path / "d"))
    assert run.returncode == 2 and "did you mean fetch_timeout_s?" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    config.write_text('max_depth = 3.7\n')
    run = crawler_node("run", "--config", str(config), "--data-dir", str(tmp_path / "d"))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "max_depth" in run.stderr


def test_config_show_says_each_value_and_where_it_came_from(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text('max_depth = 2\nretry_budget = 5\n\n[recrawl_hosts]\n"*.news.test" = "1h"\n')
    shown = crawler_node("config", "--show", "--json", "--config", str(config), "--retry-budget", "7",
                         "--allow-host", "a.test", "--secret", "s3cret", env={"CRAWLER_MAX_LINKS_PER_PAGE": "99"})
    assert shown.returncode == 0, shown.stderr
    values = json.loads(shown.stdout)
    assert values["max_depth"] == {"value": 2, "source": f"config file {config}"}
    assert values["retry_budget"] == {"value": 7, "source": "flag --retry-budget"}
    assert values["allow_hosts"] == {"value": ["a.test"], "source": "flag --allow-host"}
    assert values["max_links_per_page"] == {"value": 99, "source": "environment CRAWLER_MAX_LINKS_PER_PAGE"}
    assert values["recrawl_hosts"]["value"] == ["*.news.test=1h"]
    assert values["fetch_timeout_s"] == {"value": 30.0, "source": "default"}
    assert values["secret"]["value"] == "(set)" and "s3cret" not in shown.stdout
    table = crawler_node("config", "--show", "--max-depth", "4").stdout
    assert any(line.split()[:2] == ["max_depth", "4"] and line.endswith("[flag --max-depth]")
               for line in table.splitlines())
