"""Fixtures of the store tests: an opened Store on the test's own database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.store.engine import Store


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    """The store on an empty database of this test's own, schema migrated to the head."""
    opened = await Store.open(database_url)
    try:
        yield opened
    finally:
        await opened.close()
