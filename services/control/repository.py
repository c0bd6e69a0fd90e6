"""The leases table: who holds a named lease, and until when. The only code that touches it.

A lease is free once its ``expires_us`` has passed. Taking one is a single upsert whose
``WHERE`` decides (free, expired, or already the caller's), so two replicas racing for it
cannot both win: on SQLite the writer holds the one write lock, on PostgreSQL the second upsert
waits on the first's row lock and re-checks the condition against the committed row.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.store.tx import Sql, Tx


@dataclass(frozen=True, slots=True)
class Lease:
    """One lease as stored: its holder and its times (the holder's wall clock, microseconds)."""

    name: str
    holder: str
    acquired_us: int
    renewed_us: int
    expires_us: int


# A renewal by the holder keeps its acquired_us; a lease taken from nobody, from an expired
# holder, or back by a holder whose own term had expired starts a new term.
_TAKE = (
    "INSERT INTO leases (name, holder, acquired_us, renewed_us, expires_us)"
    " VALUES (:name, :holder, :now, :now, :expires)"
    " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,"
    " acquired_us = CASE WHEN leases.holder = excluded.holder AND leases.expires_us >= :now"
    " THEN leases.acquired_us ELSE excluded.acquired_us END,"
    " renewed_us = excluded.renewed_us, expires_us = excluded.expires_us"
    " WHERE leases.expires_us < :now OR leases.holder = :holder"
)


def read(name: str) -> Tx[Lease | None]:
    """The lease row called ``name``, expired or not; None when there is none."""
    found = (
        yield Sql(
            "SELECT name, holder, acquired_us, renewed_us, expires_us FROM leases WHERE name = :name",
            {"name": name},
        )
    ).first()
    if found is None:
        return None
    return Lease(str(found[0]), str(found[1]), int(found[2]), int(found[3]), int(found[4]))


def acquire(name: str, holder: str, now_us: int, duration_us: int) -> Tx[bool]:
    """Take or renew the lease for ``holder`` until ``now_us + duration_us`` if it is free,
    expired at ``now_us``, or already held by ``holder``; whether ``holder`` holds it after."""
    yield Sql(_TAKE, {"name": name, "holder": holder, "now": now_us, "expires": now_us + duration_us})
    lease = yield from read(name)
    return lease is not None and lease.holder == holder


def release(name: str, holder: str) -> Tx[bool]:
    """Give the lease up if ``holder`` holds it; whether there was one of ``holder``'s to give."""
    done = yield Sql("DELETE FROM leases WHERE name = :name AND holder = :holder", {"name": name, "holder": holder})
    return done.rowcount > 0


def holder(name: str, now_us: int) -> Tx[str | None]:
    """Who holds the lease at ``now_us``; None when nobody does (none, or expired)."""
    lease = yield from read(name)
    if lease is None or lease.expires_us < now_us:
        return None
    return lease.holder
