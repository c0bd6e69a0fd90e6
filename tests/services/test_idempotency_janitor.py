"""The janitor forgets idempotency keys past their retention and keeps the rest."""

from __future__ import annotations

from functools import partial

from services.allocations import janitor
from services.allocations import repository as repo
from services.allocations.idempotency import RETENTION_HOURS
from services.allocations.janitor import KeyJanitor
from services.store.engine import Database
from services.store.tx import Sql, Tx, run_in_session

NOW = 1_900_000_000_000_000
HOUR_US = 3600 * 1_000_000


async def keys(store: Database) -> set[str]:
    def read() -> Tx[set[str]]:
        result = yield Sql("SELECT request_id FROM idempotency_keys")
        return {str(row[0]) for row in result.rows}

    async with store.read() as session:
        return await run_in_session(session, read())


async def claim(store: Database, request_id: str, *, age_hours: float) -> None:
    created = NOW - int(age_hours * HOUR_US)
    await store.transact(
        partial(
            repo.claim_idempotency_key,
            "acme",
            "CreateAllocation",
            request_id,
            fingerprint="f",
            result_id="r",
            now_us=created,
        )
    )


async def test_keys_past_retention_go_and_younger_ones_stay(database_url: str) -> None:
    store = await Database.open(database_url)
    try:
        # More old keys than one batch, so the janitor has to go round again.
        old = [f"old-{i}" for i in range(janitor.BATCH + 3)]
        for request_id in old:
            await claim(store, request_id, age_hours=RETENTION_HOURS + 1)
        await claim(store, "young", age_hours=RETENTION_HOURS - 1)
        assert await KeyJanitor(store).prune_expired(at_us=NOW) == len(old)
        assert await keys(store) == {"young"}
        assert await KeyJanitor(store).prune_expired(at_us=NOW) == 0
    finally:
        await store.close()
