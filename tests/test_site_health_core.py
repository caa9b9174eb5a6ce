"""core.site_health: one judgment per host from a sliding window of what its answers said."""

from __future__ import annotations

from crawler_node.core.site_health import HealthState, HealthWindow, Signal, judge_health


def _window(*batches: tuple[float, int, tuple[Signal, ...]]) -> HealthWindow:
    window = HealthWindow(window_s=100.0, buckets=10)
    for at, times, signals in batches:
        for _ in range(times):
            window.add(at, Signal.ANSWER, *signals)
    return window


def test_a_quiet_host_is_healthy_with_a_full_score() -> None:
    health = judge_health(_window((5.0, 50, ())).counts(6.0))
    assert (health.state, health.score, health.reasons) == (HealthState.HEALTHY, 100, ())


def test_each_state_and_its_reason() -> None:
    cases = [
        ((Signal.BLOCKED,), HealthState.REFUSING, "challenge/captcha/soft-block"),
        ((Signal.THROTTLED,), HealthState.THROTTLING, "throttled"),
        ((Signal.TIMEOUT,), HealthState.FAILING, "timeouts"),
        ((Signal.LATENCY_RISE,), HealthState.SLOW, "latency"),
    ]
    for signals, state, reason in cases:
        health = judge_health(_window((5.0, 10, ()), (6.0, 5, signals)).counts(7.0), last_refusal="x")
        assert health.state is state, (signals, health)
        assert any(reason in text for text in health.reasons) and health.score < 100


def test_paused_wins_and_refusals_weigh_most() -> None:
    counts = _window((5.0, 10, ()), (6.0, 10, (Signal.BLOCKED, Signal.HALVED))).counts(7.0)
    paused = judge_health(counts, paused_for="challenge for 60 s more")
    assert paused.state is HealthState.PAUSED and paused.reasons[0].startswith("paused: challenge")
    throttled = judge_health(_window((5.0, 10, ()), (6.0, 10, (Signal.THROTTLED,))).counts(7.0))
    assert paused.score < throttled.score
    refusing = judge_health(counts, paused_for="challenge for 60 s more", refusal_pause=True)
    assert refusing.state is HealthState.REFUSING and refusing.reasons == paused.reasons


def test_a_few_403s_are_not_refusing_but_most_answers_403_are() -> None:
    assert judge_health(_window((5.0, 40, ()), (6.0, 2, (Signal.FORBIDDEN,))).counts(7.0)).state is \
        HealthState.HEALTHY
    assert judge_health(_window((5.0, 2, ()), (6.0, 5, (Signal.FORBIDDEN,))).counts(7.0)).state is \
        HealthState.REFUSING


def test_the_window_forgets_old_answers() -> None:
    window = _window((5.0, 10, (Signal.BLOCKED,)))
    assert judge_health(window.counts(50.0)).state is HealthState.REFUSING
    window.add(130.0, Signal.ANSWER)
    assert window.counts(130.0)[Signal.BLOCKED] == 0
    assert judge_health(window.counts(130.0)).state is HealthState.HEALTHY
