"""The exercises: which question each answers, what a candidate writes, what the reference is.

Plain data with no imports of ours, so that the CLI can list the catalog without loading the
modules the suites run against.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Exercise:
    """One exercise: ``id`` as typed on the command line, the folder holding it, and the
    ``reference`` modules whose names together form the interface, each name taken from the first
    module that defines it (so an adapter whose names the package also uses comes first)."""

    id: str
    title: str
    difficulty: str
    topic: str
    question: str
    reference: tuple[str, ...]
    # The names a candidate's file defines, in the order the starter declares them.
    functions: tuple[str, ...]
    # What ``start`` writes the starter as, and what ``check --impl DIR`` looks for in DIR.
    answer_file: str

    @property
    def folder(self) -> Path:
        """Where the prompt, starter, suite and known-wrong answers are."""
        return HERE / self.id.replace("-", "_")

    @property
    def suite(self) -> Path:
        """The suite's file: the same cases for the reference and for every candidate."""
        return self.folder / "suite.py"

    @property
    def prompt(self) -> Path:
        """The question as an interviewer poses it, the interface, follow-ups and the trap."""
        return self.folder / "README.md"

    @property
    def starter(self) -> Path:
        """The signatures, each raising NotImplementedError."""
        return self.folder / "starter.py"

    @property
    def wrong(self) -> tuple[Path, ...]:
        """The known-wrong answers, each named after the mistake the suite must name."""
        return tuple(sorted((self.folder / "wrong").glob("[!_]*.py")))


@dataclass(frozen=True)
class Coming:
    """An exercise whose reference module is not in the project yet."""

    id: str
    title: str
    question: str
    awaits: str


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="interval-union",
        title="GPU-seconds from overlapping intervals",
        difficulty="easy",
        topic="interval algebra",
        question="Interval union and intersection; one GPU reporting overlapping intervals.",
        reference=("accounting.intervals",),
        functions=("union", "total", "overlap", "intersect", "subtract", "clip", "excess_over"),
        answer_file="intervals.py",
    ),
    Exercise(
        id="usage-billing",
        title="Bill GPU time from raw start/stop events",
        difficulty="hard",
        topic="billing",
        question="Usage billing: pairing, clipping, open intervals, orphans, every anomaly.",
        reference=("accounting.reference",),
        functions=("compute_facts",),
        answer_file="billing.py",
    ),
    Exercise(
        id="node-health",
        title="The node state machine and health strikes",
        difficulty="medium",
        topic="fleet lifecycle",
        question="A node's lifecycle as one transition table; strikes in a window that drain or repair it.",
        reference=("services.nodes.transitions", "services.health.policy"),
        functions=("next_state", "decide"),
        answer_file="node_health.py",
    ),
    Exercise(
        id="idempotent-api",
        title="Request ids, cancel as an operation, a cursor that survives inserts",
        difficulty="medium",
        topic="API design",
        question="An idempotent create, a cancel that returns one operation, and keyset pagination under inserts.",
        reference=("services.allocations.commands", "services.paging", "exercises.idempotent_api.adapter"),
        functions=(
            "AllocationService.create",
            "AllocationService.cancel",
            "AllocationService.get_operation",
            "AllocationService.list_page",
        ),
        answer_file="allocations.py",
    ),
    Exercise(
        id="metrics-store",
        title="A segment metrics store: seal, skip, retain",
        difficulty="medium",
        topic="storage",
        question="Seal the head into immutable segments, skip segments by time range, retain by whole file.",
        reference=("tsdb", "exercises.metrics_store.adapter"),
        functions=(
            "MetricsStore.append",
            "MetricsStore.seal",
            "MetricsStore.segments",
            "MetricsStore.query",
            "MetricsStore.enforce_retention",
        ),
        answer_file="metrics_store.py",
    ),
    Exercise(
        id="bounded-fan-out",
        title="Bounded fan-out over 10,000 shards",
        difficulty="medium",
        topic="concurrency",
        question="A limit, a deadline, cancellation on first failure, results in order, no leaked task.",
        reference=("clients.fan_out",),
        functions=("fan_out",),
        answer_file="fan_out.py",
    ),
    Exercise(
        id="allocation-policies",
        title="Allocation policies and fragmentation",
        difficulty="medium",
        topic="scheduling",
        question="First, best and worst fit, a gang inside one block, the largest free block, on a replayed stream.",
        # The adapter first: scheduling has functions of the same names, over a Cluster.
        reference=("exercises.allocation_policies.adapter", "scheduling"),
        functions=("first_fit", "best_fit", "worst_fit", "place_gang", "largest_free_block"),
        answer_file="allocation.py",
    ),
)

COMING: tuple[Coming, ...] = ()


class UnknownExercise(LookupError):
    """No exercise has this id; the message names the ones there are."""


def find(exercise_id: str) -> Exercise:
    """The exercise ``exercise_id``, or UnknownExercise naming every known id (and saying when
    the id is one that is coming)."""
    for exercise in EXERCISES:
        if exercise.id == exercise_id:
            return exercise
    known = ", ".join(e.id for e in EXERCISES)
    for coming in COMING:
        if coming.id == exercise_id:
            raise UnknownExercise(f"{exercise_id!r} is coming ({coming.awaits}); the exercises are: {known}")
    raise UnknownExercise(f"no exercise {exercise_id!r}; the exercises are: {known}")
