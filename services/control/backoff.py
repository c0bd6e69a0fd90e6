"""Exponential backoff, the one rule for every retry in the control loops.

A key that failed to reconcile and a loop that crashed both wait ``base_s`` after their first
failure in a row, twice that after the second, and so on up to ``cap_s``. Only the numbers
differ: the work queue's are controller-runtime's per-item defaults (5 ms to 1,000 s), the loop
manager's 1 s to 60 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """base_s x 2^earlier_failures, at most cap_s."""

    base_s: float
    cap_s: float

    def __post_init__(self) -> None:
        if not 0 < self.base_s <= self.cap_s:
            raise ValueError(f"unusable backoff: need 0 < base_s <= cap_s, got base_s={self.base_s} cap_s={self.cap_s}")

    def delay_s(self, earlier_failures: int) -> float:
        """The wait before the next try, after ``earlier_failures`` failures in a row before the
        latest one (0: the first retry waits ``base_s``)."""
        if earlier_failures < 0:
            raise ValueError(f"earlier_failures must be >= 0, got {earlier_failures}")
        try:
            delay = math.ldexp(self.base_s, earlier_failures)
        except OverflowError:
            return self.cap_s
        return min(delay, self.cap_s)
