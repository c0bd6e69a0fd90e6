"""The client's automatic request ids are RFC 9562 UUIDv7: time first, so later ones sort later."""

from __future__ import annotations

import time
import uuid

from clients.request_ids import new_request_id


def test_a_request_id_is_a_version_7_rfc_uuid_stamped_now() -> None:
    before = time.time_ns() // 1_000_000
    text = new_request_id()
    made = uuid.UUID(text)
    after = time.time_ns() // 1_000_000
    assert text == str(made)  # the canonical form: lower-case hex in 8-4-4-4-12 groups
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert before <= made.int >> 80 <= after


def test_request_ids_are_unique_and_never_sort_before_earlier_ones() -> None:
    made = [new_request_id() for _ in range(5_000)]
    assert len(set(made)) == len(made)
    # Within one millisecond the random part decides, so compare the time prefix only.
    stamps = [uuid.UUID(m).int >> 80 for m in made]
    assert stamps == sorted(stamps)
