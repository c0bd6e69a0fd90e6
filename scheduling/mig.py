"""MIG on an H100 80GB: the profiles, where each may start, and layouts as bit masks.

A GPU in MIG mode has 7 compute slices and 8 memory slices. An instance of a profile takes a
run of memory slices that must begin at one of the profile's allowed start positions; NVIDIA's
placement table (``nvidia-smi mig -lgipp``) is the whole rule. A layout is an 8-bit mask of the
memory slices in use (bit ``i`` = slice ``i``), so every question about a GPU is a lookup in a
table of 256 entries built once.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduling.errors import UnknownProfile

MEMORY_SLICES = 8
COMPUTE_SLICES = 7
LAYOUTS = 1 << MEMORY_SLICES
# A memory slice counted as a share of the GPU: 8 slices make the 1000 thousandths of a GPU.
MILLI_PER_SLICE = 1000 // MEMORY_SLICES


class Profile(NamedTuple):
    """A GPU instance profile: its name, compute slices, memory slices (its size) and the memory
    slice positions it may start at."""

    name: str
    compute: int
    size: int
    starts: tuple[int, ...]

    def mask(self, start: int) -> int:
        """The memory slices an instance started at ``start`` takes."""
        return ((1 << self.size) - 1) << start

    @property
    def max_instances(self) -> int:
        """How many instances fit on an empty GPU: one per start, as the starts never overlap."""
        return len(self.starts)


# NVIDIA's placement table for the H100 80GB. The 1g.10gb+me profile (media engines, one per
# GPU) is left out: it places as 1g.10gb and no request asks for the media engines.
PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("1g.10gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        Profile("1g.20gb", 1, 2, (0, 2, 4, 6)),
        Profile("2g.20gb", 2, 2, (0, 2, 4)),
        Profile("3g.40gb", 3, 4, (0, 4)),
        Profile("4g.40gb", 4, 4, (0,)),
        Profile("7g.80gb", 7, 8, (0,)),
    )
}


def profile(name: str) -> Profile:
    """The profile called ``name``."""
    try:
        return PROFILES[name]
    except KeyError:
        raise UnknownProfile(f"unknown MIG profile {name!r}; known: {', '.join(PROFILES)}") from None


def starts_free(layout: int, prof: Profile) -> list[int]:
    """The start positions where ``prof`` fits on a GPU whose used slices are ``layout``."""
    return [s for s in prof.starts if not layout & prof.mask(s)]


def count_fitting(layout: int, prof: Profile) -> int:
    """How many more instances of ``prof`` alone fit beside ``layout`` (starts never overlap)."""
    return len(starts_free(layout, prof))


def _room(layout: int) -> int:
    """How much a layout still offers: the free instances of every profile, summed. Placing at
    the start that keeps this highest hurts the GPU's future least."""
    return sum(count_fitting(layout, p) for p in PROFILES.values())


def best_start(layout: int, prof: Profile) -> int | None:
    """The start that leaves the GPU the most room for later instances (the lowest on a tie), or
    None when ``prof`` does not fit. A 3g.40gb on an empty GPU starts at 4: slices 0-3 then
    still take a 4g.40gb or four 1g.10gb, where starting at 0 would leave three 1g.10gb."""
    free = starts_free(layout, prof)
    if not free:
        return None
    return max(free, key=lambda s: (_room(layout | prof.mask(s)), -s))


def is_valid_layout(instances: list[tuple[Profile, int]]) -> bool:
    """Whether NVIDIA allows these (profile, start) instances together on one GPU: each at an
    allowed start, no memory slice twice, at most 7 compute slices."""
    used = 0
    for prof, start in instances:
        if start not in prof.starts or used & prof.mask(start):
            return False
        used |= prof.mask(start)
    return sum(p.compute for p, _ in instances) <= COMPUTE_SLICES


def _fits_table() -> dict[str, npt.NDArray[np.bool_]]:
    table = {}
    for name, prof in PROFILES.items():
        table[name] = np.array([bool(starts_free(layout, prof)) for layout in range(LAYOUTS)], dtype=np.bool_)
        table[name].setflags(write=False)
    return table


# FITS[name][layout]: whether one more instance of the profile fits beside ``layout``; read with
# a whole array of layouts at once.
FITS: dict[str, npt.NDArray[np.bool_]] = _fits_table()
