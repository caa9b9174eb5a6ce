import random

import pytest

from crawler_node.core.limiter import AimdLimiter, Outcome


def run_round(limiter: AimdLimiter, outcome: Outcome = Outcome.SUCCESS) -> None:
    """Fill the window, then complete every request with ``outcome``."""
    tickets = [limiter.acquire() for _ in range(limiter.limit)]
    for ticket in tickets:
        limiter.release(ticket, outcome)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"floor": 0},
        {"start": 0},
        {"start": 5, "ceiling": 4},
        {"start": 1, "floor": 2},
        {"decrease": 0.0},
        {"decrease": 1.0},
        {"increase": 0.0},
    ],
)
def test_constructor_validates(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        AimdLimiter(**kwargs)


def test_in_flight_bookkeeping_and_capacity() -> None:
    limiter = AimdLimiter(start=2)
    assert (limiter.limit, limiter.in_flight, limiter.has_capacity()) == (2, 0, True)
    first, second = limiter.acquire(), limiter.acquire()
    assert limiter.in_flight == 2
    assert not limiter.has_capacity()
    with pytest.raises(RuntimeError):
        limiter.acquire()
    limiter.release(first, Outcome.NEUTRAL)
    assert limiter.in_flight == 1 and limiter.has_capacity()
    limiter.release(second, Outcome.ERROR)
    assert limiter.in_flight == 0
    with pytest.raises(RuntimeError):
        limiter.release(0, Outcome.SUCCESS)


def test_a_full_round_of_successes_adds_about_one() -> None:
    limiter = AimdLimiter(start=4, ceiling=100)
    for _ in range(10):
        before = limiter.window
        run_round(limiter)
        # A round has limit = floor(window) requests, each adding 1/window: a bit under 1.
        assert 0.75 < limiter.window - before <= 1.0
    assert 12 <= limiter.limit <= 14
    assert limiter.increases == limiter.limit - 4


def test_increase_never_exceeds_ceiling() -> None:
    limiter = AimdLimiter(start=2, ceiling=5)
    for _ in range(50):
        run_round(limiter)
        assert limiter.limit <= 5
    assert limiter.limit == 5 and limiter.window == 5.0


def test_window_grows_only_while_it_is_used() -> None:
    # One request at a time never tests a window of 2, so it must not grow past it.
    limiter = AimdLimiter(start=2, ceiling=16)
    for _ in range(100):
        limiter.release(limiter.acquire(), Outcome.SUCCESS)
    assert limiter.limit == 2


def test_a_burst_of_throttles_from_one_window_halves_once() -> None:
    limiter = AimdLimiter(start=8, ceiling=16)
    tickets = [limiter.acquire() for _ in range(8)]
    for ticket in tickets:
        limiter.release(ticket, Outcome.THROTTLED)
    assert limiter.limit == 4
    assert limiter.decreases == 1


def test_each_new_window_may_decrease_again_down_to_the_floor() -> None:
    limiter = AimdLimiter(start=16, floor=3, ceiling=16)
    for expected in (8, 4, 3, 3):
        run_round(limiter, Outcome.TIMEOUT)
        assert limiter.limit == expected
    assert limiter.window >= 3


def test_successes_from_before_a_decrease_do_not_undo_it() -> None:
    limiter = AimdLimiter(start=8, ceiling=16)
    tickets = [limiter.acquire() for _ in range(8)]
    limiter.release(tickets[0], Outcome.THROTTLED)
    for ticket in tickets[1:]:
        limiter.release(ticket, Outcome.SUCCESS)
    assert limiter.limit == 4


@pytest.mark.parametrize("outcome", [Outcome.ERROR, Outcome.NEUTRAL])
def test_errors_and_neutral_outcomes_leave_the_window_alone(outcome: Outcome) -> None:
    limiter = AimdLimiter(start=4)
    for _ in range(10):
        run_round(limiter, outcome)
    assert limiter.window == 4.0
    assert (limiter.increases, limiter.decreases) == (0, 0)


def test_snapshot() -> None:
    limiter = AimdLimiter(start=3)
    limiter.acquire()
    assert limiter.snapshot() == {"limit": 3, "in_flight": 1, "window": 3.0, "decreases": 0, "increases": 0,
                                  "throttle_point": None}


def test_random_outcomes_keep_every_invariant() -> None:
    rng = random.Random(7)
    limiter = AimdLimiter(start=3, floor=2, ceiling=9)
    outstanding: list[int] = []
    for _ in range(20_000):
        if outstanding and (not limiter.has_capacity() or rng.random() < 0.5):
            ticket = outstanding.pop(rng.randrange(len(outstanding)))
            limiter.release(ticket, rng.choice(list(Outcome)))
        else:
            outstanding.append(limiter.acquire())
        assert 2 <= limiter.limit <= 9
        assert 2.0 <= limiter.window <= 9.0
        assert limiter.in_flight == len(outstanding)


def test_converges_on_a_host_that_tolerates_four() -> None:
    """Per-round simulation (one round = one response time): the host throttles any request
    that arrives while more than 4 are in flight. Completion order within a round is random."""
    tolerated = 4
    rng = random.Random(42)
    limiter = AimdLimiter(start=2, floor=1, ceiling=16)
    limits: list[int] = []
    sent = throttled = 0
    for round_number in range(600):
        batch = []
        while limiter.has_capacity():
            ticket = limiter.acquire()
            batch.append((ticket, limiter.in_flight > tolerated))
        rng.shuffle(batch)
        for ticket, was_throttled in batch:
            limiter.release(ticket, Outcome.THROTTLED if was_throttled else Outcome.SUCCESS)
        if round_number >= 100:  # warm-up done
            limits.append(len(batch))
            sent += len(batch)
            throttled += sum(was_throttled for _, was_throttled in batch)
    assert 2 <= min(limits) and max(limits) <= 5
    # The throttle point is remembered, so probes get rarer instead of sawtoothing into it.
    assert throttled / sent < 0.02
    # It does use the capacity: on average at least 3.8 of the 4 tolerated slots.
    assert sent / len(limits) >= 3.8


def throttle_at(limiter: AimdLimiter, tolerated: int) -> list[bool]:
    """One round against a host that throttles what arrives above ``tolerated`` in flight;
    successes come back first, the throttles last (the worst order for the limiter)."""
    batch = []
    while limiter.has_capacity():
        ticket = limiter.acquire()
        batch.append((ticket, limiter.in_flight > tolerated))
    for ticket, throttled in sorted(batch, key=lambda item: item[1]):
        limiter.release(ticket, Outcome.THROTTLED if throttled else Outcome.SUCCESS)
    return [throttled for _, throttled in batch]


def test_a_throttle_remembers_the_point_and_recovery_is_fast_up_to_just_below_it() -> None:
    limiter = AimdLimiter(start=6, floor=1, ceiling=16)
    run_round(limiter, Outcome.THROTTLED)
    assert (limiter.throttle_point, limiter.plateau, limiter.limit) == (6, 5, 3)
    run_round(limiter)  # +1 per success below the plateau: 3 -> 5 (capped) in one round
    assert limiter.limit == 5
    for _ in range(limiter.probe_rounds - 1):
        run_round(limiter)
        assert limiter.limit == 5, "must stay on the plateau until probe_rounds clean rounds"
    run_round(limiter)
    assert limiter.limit == 6  # the probe


def test_each_throttled_probe_doubles_the_wait_up_to_the_maximum() -> None:
    limiter = AimdLimiter(start=2, floor=1, ceiling=16, probe_rounds=2, max_probe_rounds=16)
    waits = []
    rounds_since_probe = 0
    for _ in range(400):
        outcomes = throttle_at(limiter, tolerated=4)
        rounds_since_probe += 1
        if any(outcomes):
            waits.append(rounds_since_probe)
            rounds_since_probe = 0
        assert limiter.limit <= 5
    # the first throttle finds the point; after that each probe waits twice as long as the last
    gaps = waits[2:]
    assert gaps[:4] == sorted(gaps[:4]) and gaps[-1] >= 16
    assert max(gaps) <= 16 + 3  # plateau rounds plus the fast climb back


def test_a_clean_round_at_the_throttle_point_forgets_it() -> None:
    limiter = AimdLimiter(start=4, floor=1, ceiling=16, probe_rounds=1)
    run_round(limiter, Outcome.THROTTLED)
    assert limiter.throttle_point == 4
    for _ in range(3):
        run_round(limiter)
    assert limiter.limit == 4  # probing the point; the host now takes it
    run_round(limiter)
    assert limiter.throttle_point is None
    for _ in range(3):
        run_round(limiter)
    assert limiter.limit >= 6  # plain additive increase again


def test_successes_sent_before_a_probe_do_not_count_for_it() -> None:
    limiter = AimdLimiter(start=4, floor=1, ceiling=16, probe_rounds=1)
    run_round(limiter, Outcome.THROTTLED)  # point 4, plateau 3
    run_round(limiter)  # back to 3
    tickets = [limiter.acquire() for _ in range(3)]
    limiter.release(tickets.pop(), Outcome.SUCCESS)
    limiter.release(tickets.pop(), Outcome.SUCCESS)
    limiter.release(tickets.pop(), Outcome.SUCCESS)  # the third clean success starts the probe
    assert limiter.limit == 4
    old = [limiter.acquire() for _ in range(3)]
    # only now does the plateau-era traffic report; none of it proves the probe clean
    for ticket in old:
        limiter.release(ticket, Outcome.SUCCESS)
    assert limiter.throttle_point == 4


def test_a_throttle_below_the_point_moves_it_down() -> None:
    limiter = AimdLimiter(start=8, floor=1, ceiling=16)
    run_round(limiter, Outcome.THROTTLED)
    assert limiter.throttle_point == 8
    run_round(limiter, Outcome.TIMEOUT)  # the host got slower: timeouts at 4
    assert limiter.throttle_point == 4 and limiter.limit == 2


@pytest.mark.parametrize("seed", range(5))
def test_random_outcomes_keep_the_plateau_invariant(seed: int) -> None:
    rng = random.Random(seed)
    limiter = AimdLimiter(start=4, floor=1, ceiling=12, probe_rounds=2, max_probe_rounds=8)
    outstanding: list[int] = []
    for _ in range(20_000):
        if outstanding and (not limiter.has_capacity() or rng.random() < 0.5):
            ticket = outstanding.pop(rng.randrange(len(outstanding)))
            weights = [20, 1, 1, 2, 2]  # mostly successes
            limiter.release(ticket, rng.choices(list(Outcome), weights)[0])
        else:
            outstanding.append(limiter.acquire())
        assert 1 <= limiter.limit <= 12
        point = limiter.throttle_point
        if point is not None:
            # while a throttle point is remembered, the limit never goes above it
            assert limiter.limit <= max(point, limiter.floor + 1)
            assert limiter.plateau == max(1, point - 1)


@pytest.mark.parametrize("tolerated", [1, 2, 3, 4, 6])
def test_converges_below_five_percent_throttles_for_any_tolerance(tolerated: int) -> None:
    rng = random.Random(tolerated)
    limiter = AimdLimiter(start=2, floor=1, ceiling=8)
    sent = throttled = used = rounds = 0
    for round_number in range(800):
        batch = []
        while limiter.has_capacity():
            ticket = limiter.acquire()
            batch.append((ticket, limiter.in_flight > tolerated))
        rng.shuffle(batch)
        for ticket, was_throttled in batch:
            limiter.release(ticket, Outcome.THROTTLED if was_throttled else Outcome.SUCCESS)
        if round_number >= 50:
            rounds += 1
            sent += len(batch)
            throttled += sum(t for _, t in batch)
            used += len(batch) - sum(t for _, t in batch)
    assert throttled / sent < 0.05
    assert used / rounds >= 0.9 * tolerated
