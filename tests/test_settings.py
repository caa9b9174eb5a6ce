from pathlib import Path

import pytest

from crawler_node.settings import SettingsError
from crawler_node.settings_sources import load_settings


def test_flag_beats_env_beats_file_beats_default(tmp_path: Path):
    config = tmp_path / "node.toml"
    config.write_text('max_depth = 3\nglobal-inflight = 10\nnode_id = "from-file"\nseeds = ["http://a.test/"]\n')
    env = {"CRAWLER_MAX_DEPTH": "5", "CRAWLER_NODE_ID": "from-env"}
    settings = load_settings({"max_depth": "7"}, env=env, config_path=config)
    assert settings.max_depth == 7
    assert settings.node_id == "from-env"
    assert settings.global_inflight == 10
    assert settings.seeds == ["http://a.test/"]
    assert settings.host_limit_ceiling == 1  # the default pace, polite


def test_the_pace_fills_what_was_not_set_and_a_setting_beats_it(tmp_path: Path):
    polite = load_settings({})
    assert (polite.pace, polite.host_limit_start, polite.host_limit_ceiling, polite.min_host_delay_s) == (
        "polite", 1, 1, 1.0)
    adaptive = load_settings({"pace": "adaptive", "host_limit_ceiling": "4"})
    assert (adaptive.host_limit_start, adaptive.host_limit_ceiling, adaptive.min_host_delay_s) == (2, 4, 0.0)
    config = tmp_path / "node.toml"
    config.write_text('pace = "adaptive"\n')
    # a delay given in the environment beats the pace given in the file
    mixed = load_settings({}, env={"CRAWLER_MIN_HOST_DELAY_S": "0.5"}, config_path=config)
    assert (mixed.host_limit_ceiling, mixed.min_host_delay_s) == (8, 0.5)
    with pytest.raises(SettingsError, match="pace must be one of polite, adaptive"):
        load_settings({"pace": "reckless"})


def test_env_lists_and_booleans():
    env = {"CRAWLER_PEERS": "a=http://127.0.0.2:8080, b=http://127.0.0.3:8080", "CRAWLER_ALLOW_PRIVATE": "yes"}
    settings = load_settings({}, env=env)
    assert settings.peer_map() == {"a": "http://127.0.0.2:8080", "b": "http://127.0.0.3:8080"}
    assert settings.allow_private is True


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"listen": "nonsense"}, "listen address"),
        ({"host_limit_start": "9", "host_limit_ceiling": "4"}, "floor <= start <= ceiling"),
        ({"global_inflight": "0"}, "global_inflight"),
        ({"peers": ["no-equals-sign"]}, "ID=http"),
        ({"max_depth": "three"}, "max_depth"),
        ({"proxy": "socks5://x"}, "proxy"),
        ({"fetch_timeout_s": "500"}, "lease_timeout_s"),
        ({"event_loop": "tokio"}, "event_loop must be one of auto, asyncio, uvloop"),
        ({"cookies": "yes"}, "cookies must be 'on' or 'off', got 'yes'"),
        # the flow-control checks (the groups of crawler_node.config)
        ({"latency_rise_factor": "0.5"}, "latency_rise_factor must be 0 \\(off\\) or > 1"),
        ({"shed_high_water": "10", "shed_low_water": "10"}, "need 0 <= shed_low_water < shed_high_water"),
        ({"host_backoff_initial_s": "9", "host_backoff_cap_s": "1"}, "host_backoff_initial_s <= host_backoff_cap_s"),
        ({"active_hosts": "-1"}, "active_hosts and host_turn_s must be >= 0"),
    ],
)
def test_bad_settings_say_what_is_wrong(flags, message):
    with pytest.raises(SettingsError, match=message):
        load_settings(flags, env={})


def test_unknown_config_key_is_an_error(tmp_path: Path):
    config = tmp_path / "bad.toml"
    config.write_text("max_dpeth = 3\n")
    with pytest.raises(SettingsError, match="unknown setting 'max_dpeth'"):
        load_settings({}, env={}, config_path=config)
