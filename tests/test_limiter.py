import random

import pytest

from crawler_node.limiter import AimdLimiter, Outcome


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
    assert limiter.snapshot() == {"limit": 3, "in_flight": 1, "window": 3.0, "decreases": 0, "increases": 0}


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
    assert 2 <= min(limits) and max(limits) <= 6
    assert throttled / sent < 0.10
    # It does use the capacity: on average at least 3 of the 4 tolerated slots.
    assert sent / len(limits) >= 3
