"""The health controller's safety limit: the larger of a floor and a share of the pool."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.health.config import HealthConfig


@pytest.mark.parametrize(("pool", "limit"), [(0, 3), (10, 3), (30, 3), (31, 4), (1000, 100), (10_000, 1000)])
def test_a_pool_may_lose_the_larger_of_three_and_a_tenth_an_hour(pool: int, limit: int) -> None:
    assert HealthConfig().removal_limit(pool) == limit


@pytest.mark.parametrize(
    ("make", "refused"),
    [
        (lambda: HealthConfig(removals_per_hour=-1), "removals_per_hour"),
        (lambda: HealthConfig(removal_share_per_hour=1.5), "removal_share_per_hour"),
        (lambda: HealthConfig(resync_s=0.0), "resync_s"),
        (lambda: HealthConfig(held_retry_s=-1.0), "held_retry_s"),
    ],
)
def test_settings_that_make_no_sense_are_refused(make: Callable[[], HealthConfig], refused: str) -> None:
    with pytest.raises(ValueError, match=refused):
        make()
