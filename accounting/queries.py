"""The SQL of the DuckDB engine, one statement per step, in the order ``engine.py`` runs them.

Inputs, registered from Arrow by ``engine.py``:

* ``raw_events(seq, event_id, tenant, alloc, gpu, model, tg, gm, is_stop, at_us, is_spot)``:
  ``seq`` is the input position; tenant, allocation, GPU and model are integer codes of their
  strings (hashing and sorting integers is several times cheaper than strings; the engine
  decodes the results), ``event_id`` stays a string because its order breaks ties. ``tg``
  numbers the (tenant, GPU, model) triples and ``gm`` the (GPU, model) pairs, densely, so they
  pack with a time into one sort key (``accounting.packing``).
* ``raw_outages(seq, gpu, start_us, end_us)`` with the same GPU codes.
* ``commitments(cid, tenant, model, gpus)``, ``cid`` its row number.
* variables ``p0`` and ``p1``: the period ``[p0, p1)``.

The sweeps (segments, overage, breaches) order by one packed key, ``group << shift | (t - p0)``,
instead of ``PARTITION BY group ORDER BY t``: one integer sort key and no partitioning (half the
CPU time for the bare union, a little less for these smaller sweeps). Sums that can grow with the period (totals,
per-group seconds) are HUGEINT, so no period length overflows them.

Every window has a unique ORDER BY. With ties, two window functions over "the same" order can
sort peers differently, and a gaps-and-islands count then glues an interval onto the wrong
island (docs/billing.md). The sweeps here would be immune anyway: at tied times they emit
zero-length stretches, which are dropped; the tiebreakers make that evident, not lucky.

A sweep: every interval becomes a +1 edge at its start and a -1 edge at its end; the running sum
over the edges in time order is how many intervals are open, and ``LEAD(t) - t`` is how long
that count lasts. Several counters over the same edges (all usage, on-demand usage, outages)
give union, on-demand precedence and credits in one pass.
"""

from __future__ import annotations

from accounting.facts import PAYLOAD_FIELDS
from accounting.packing import PackedKey

IN_PERIOD = "(getvariable('p0') <= {0} AND {0} < getvariable('p1'))"

# The column of raw_events holding each payload field (the same information, encoded).
PAYLOAD_COLUMNS = {
    "tenant_id": "tenant",
    "allocation_id": "alloc",
    "gpu_uuid": "gpu",
    "gpu_model": "model",
    "kind": "is_stop",
    "at_us": "at_us",
    "price_class": "is_spot",
}
_MASK = " + ".join(
    f"(CASE WHEN r.{PAYLOAD_COLUMNS[name]} <> s.{PAYLOAD_COLUMNS[name]} THEN {1 << bit} ELSE 0 END)"
    for bit, name in enumerate(PAYLOAD_FIELDS)
)

# Step 1 (steps as numbered in reference.py): the first copy of each event id (lowest seq)
# stands; later copies are repeats, with a mask of the payload fields that differ from the
# standing copy (bit i: PAYLOAD_FIELDS[i]). Most ids have one copy, so grouping once and
# joining the few repeats is cheap.
REPEATS = f"""
CREATE TEMP TABLE repeats AS
WITH firsts AS (
    SELECT event_id, MIN(seq) AS first_seq FROM raw_events GROUP BY event_id HAVING COUNT(*) > 1
)
SELECT r.seq, r.event_id, f.first_seq, {_MASK} AS mask
FROM raw_events r
JOIN firsts f ON f.event_id = r.event_id AND r.seq <> f.first_seq
JOIN raw_events s ON s.seq = f.first_seq
"""

# Step 2, in one window pass per (tenant, allocation, GPU) stream. After a start the stream is
# open and after a stop it is closed, whatever came before; so a row's role follows from its
# own kind and the previous row's. ``k``, the number of stops before a row, groups each run of
# starts with the stop that ends it: the run's first start opens, the others are duplicates,
# and the stop closes (a stop with no start in its group has none to close).
STEPS = """
CREATE TEMP TABLE steps AS
SELECT *,
    CASE
        WHEN is_stop = 0 AND LAG(is_stop) OVER w = 0 THEN 'duplicate_start'
        WHEN is_stop = 0 THEN 'open'
        WHEN LAG(is_stop) OVER w = 0 THEN 'close'
        ELSE 'orphan_stop'
    END AS role,
    SUM(is_stop) OVER w - is_stop AS k
FROM raw_events ANTI JOIN repeats USING (seq)
WINDOW w AS (PARTITION BY tenant, alloc, gpu ORDER BY at_us, is_stop, event_id ROWS UNBOUNDED PRECEDING)
"""

# A stop with nothing to stop right before a start that nothing stops, in one stream: the stop
# was stamped before its start (a clock behind). Neither is billed (STOP_BEFORE_START). The
# start right after a stop is its group's opening start (``k`` one more than the stop's).
STAMPED_EARLY = """
CREATE TEMP TABLE stamped_early AS
SELECT s.seq AS stop_seq, o.seq AS start_seq
FROM steps s
JOIN steps o ON o.role = 'open' AND o.tenant = s.tenant AND o.alloc = s.alloc AND o.gpu = s.gpu AND o.k = s.k + 1
WHERE s.role = 'orphan_stop' AND NOT EXISTS (
    SELECT 1 FROM steps c
    WHERE c.role = 'close' AND c.tenant = o.tenant AND c.alloc = o.alloc AND c.gpu = o.gpu AND c.k = o.k
)
"""

# Each opening start with its run's closing stop (none: never stopped), and step 3: the span
# [cs, ce) clipped to the period. An empty span lies outside the period (or has zero length).
# The interval takes its model and price class from its start.
PAIRS = """
CREATE TEMP TABLE pairs AS
SELECT o.seq AS rid, o.tenant, o.alloc, o.gpu, o.model, o.tg, o.gm, o.is_spot,
    o.event_id AS start_id, o.at_us AS start_us, c.event_id AS stop_id, c.at_us AS stop_us,
    GREATEST(o.at_us, getvariable('p0')) AS cs,
    LEAST(COALESCE(c.at_us, getvariable('p1')), getvariable('p1')) AS ce
FROM steps o
LEFT JOIN steps c ON c.role = 'close' AND c.tenant = o.tenant AND c.alloc = o.alloc AND c.gpu = o.gpu AND c.k = o.k
WHERE o.role = 'open' AND o.seq NOT IN (SELECT start_seq FROM stamped_early)
"""

# The fate of every standing event: billed, outside, or the anomaly that keeps it out.
FATES = f"""
CREATE TEMP TABLE fates AS
WITH pair_fates AS (
    SELECT start_id, stop_id, CASE
        WHEN stop_us = start_us THEN CASE WHEN {IN_PERIOD.format("start_us")} THEN 'ZERO_LENGTH' ELSE 'outside' END
        WHEN ce > cs THEN 'billed'
        ELSE 'outside'
    END AS fate
    FROM pairs
)
SELECT start_id AS event_id, fate FROM pair_fates
UNION ALL SELECT stop_id, fate FROM pair_fates WHERE stop_id IS NOT NULL
UNION ALL
SELECT event_id, CASE
    WHEN NOT {IN_PERIOD.format("at_us")} THEN 'outside'
    WHEN role = 'duplicate_start' THEN 'DUPLICATE_START'
    ELSE 'STOP_WITHOUT_START'
END
FROM steps WHERE role IN ('duplicate_start', 'orphan_stop') AND seq NOT IN (SELECT stop_seq FROM stamped_early)
UNION ALL
-- Both events of a stop stamped before its start go where the start's time puts them.
SELECT e.event_id, CASE WHEN {IN_PERIOD.format("o.at_us")} THEN 'STOP_BEFORE_START' ELSE 'outside' END
FROM stamped_early k JOIN steps o ON o.seq = k.start_seq JOIN steps e ON e.seq IN (k.stop_seq, k.start_seq)
"""

# Repeats follow the fate of the copy that stands.
FATE_COUNTS = """
SELECT fate, COUNT(*) FROM (
    SELECT fate FROM fates
    UNION ALL
    SELECT CASE
        WHEN f.fate = 'outside' THEN 'outside'
        WHEN r.mask = 0 THEN 'DUPLICATE_EVENT'
        ELSE 'CONFLICTING_DUPLICATE'
    END
    FROM repeats r JOIN fates f USING (event_id)
)
GROUP BY fate
"""

EVENT_COLUMNS = ("event_id", "tenant", "alloc", "gpu", "model", "is_stop", "at_us", "is_spot")


def _event_columns(alias: str) -> str:
    return ", ".join(f"{alias}.{column}" for column in EVENT_COLUMNS)


COPY_ANOMALIES = f"""
SELECT {_event_columns("s")},
    COUNT(*) FILTER (WHERE r.mask = 0), COUNT(*) FILTER (WHERE r.mask <> 0), BIT_OR(r.mask)
FROM repeats r JOIN raw_events s ON s.seq = r.first_seq JOIN fates f ON f.event_id = r.event_id
WHERE f.fate <> 'outside'
GROUP BY ALL
"""

DUPLICATE_STARTS = f"""
SELECT {_event_columns("d")}, o.event_id, o.at_us
FROM steps d JOIN steps o ON o.role = 'open' AND o.tenant = d.tenant AND o.alloc = d.alloc AND o.gpu = d.gpu
    AND o.k = d.k
WHERE d.role = 'duplicate_start' AND {IN_PERIOD.format("d.at_us")}
"""

ORPHAN_STOPS = f"""
SELECT {_event_columns("s")} FROM steps s
WHERE s.role = 'orphan_stop' AND {IN_PERIOD.format("s.at_us")} AND s.seq NOT IN (SELECT stop_seq FROM stamped_early)
"""

STOPS_BEFORE_STARTS = f"""
SELECT {_event_columns("o")}, s.event_id, s.at_us
FROM stamped_early k JOIN steps o ON o.seq = k.start_seq JOIN steps s ON s.seq = k.stop_seq
WHERE {IN_PERIOD.format("o.at_us")}
"""

# Zero-length pairs in the period, and starts never stopped (with the time billed for them).
PAIR_ANOMALIES = f"""
SELECT start_id, tenant, alloc, gpu, model, 0, start_us, is_spot, stop_id, ce - cs
FROM pairs
WHERE (stop_us = start_us AND {IN_PERIOD.format("start_us")}) OR (stop_id IS NULL AND ce > cs)
"""

# The intervals billing works on: paired, non-empty after clipping.
HELD = "CREATE TEMP TABLE held AS SELECT * FROM pairs WHERE ce > cs"

OUTAGE_SPANS = """
CREATE TEMP TABLE outage_spans AS
SELECT seq AS oid, gpu, GREATEST(start_us, getvariable('p0')) AS s, LEAST(end_us, getvariable('p1')) AS e
FROM raw_outages
WHERE LEAST(end_us, getvariable('p1')) > GREATEST(start_us, getvariable('p0'))
"""

# The (tenant, GPU) pairs with an interval in the period; ``tg`` numbers them (and ``gm`` the
# GPUs): small integers for the packed keys of the sweeps.
TENANT_GPUS = "CREATE TEMP TABLE tenant_gpus AS SELECT DISTINCT tg, tenant, gpu, model, gm FROM held"


def edges(key: PackedKey) -> str:
    """Step 4, the sweep per (tenant, GPU): its edges, each with a packed key ``(tg, t)``.

    Counters of held intervals, on-demand ones, and outages (each outage of a GPU is replayed for
    every tenant that held it); each counter's edges add up to zero per pair. Tiebreakers are
    unique: rid and oid are input positions, and the low two bits say which edge of what.
    """
    return f"""
CREATE TEMP TABLE edges AS
SELECT {key.pack("tg", "cs")} AS key, 1 AS d_held, 1 - is_spot AS d_od, 0 AS d_down, rid * 4 AS tie FROM held
UNION ALL
SELECT {key.pack("tg", "ce")}, -1, is_spot - 1, 0, rid * 4 + 1 FROM held
UNION ALL
SELECT {key.pack("k.tg", "o.s")}, 0, 0, 1, o.oid * 4 + 2 FROM tenant_gpus k JOIN outage_spans o USING (gpu)
UNION ALL
SELECT {key.pack("k.tg", "o.e")}, 0, 0, -1, o.oid * 4 + 3 FROM tenant_gpus k JOIN outage_spans o USING (gpu)
"""


def segments(key: PackedKey) -> str:
    """The stretches a tenant held a GPU, each with its counters, in one pass over all pairs.

    No PARTITION BY: the running sums restart at zero at every pair's first edge, because each
    pair's edges add up to zero, and a stretch reaching into the next pair starts at the last
    edge of a pair, where nothing is held (dropped). Ties yield zero-length stretches, dropped
    too, so the order among tied edges cannot change a total; ``tie`` makes it unique anyway.
    """
    return f"""
CREATE TEMP TABLE segments AS
SELECT k.tenant, k.gpu, k.model, k.gm, s.tg, s.seg_start, s.seg_end, s.n_held, s.n_od, s.n_down
FROM (
    SELECT {key.group("key")} AS tg, {key.time("key")} AS seg_start, {key.time("next_key")} AS seg_end,
        n_held, n_od, n_down
    FROM (
        SELECT key, LEAD(key) OVER w AS next_key,
            SUM(d_held) OVER w AS n_held, SUM(d_od) OVER w AS n_od, SUM(d_down) OVER w AS n_down
        FROM edges
        WINDOW w AS (ORDER BY key, tie ROWS UNBOUNDED PRECEDING)
    )
    WHERE n_held > 0 AND next_key > key
) s
JOIN tenant_gpus k USING (tg)
"""


# Per tenant and GPU: the overlap counted once, the credit, and on-demand precedence over spot.
PER_GPU = """
CREATE TEMP TABLE per_gpu AS
SELECT tenant, gpu, model,
    SUM((n_held - 1) * (seg_end - seg_start))::HUGEINT AS overlap_us,
    SUM(CASE WHEN n_down > 0 THEN seg_end - seg_start ELSE 0 END)::HUGEINT AS credited_us,
    SUM(CASE WHEN n_down = 0 AND n_od > 0 THEN seg_end - seg_start ELSE 0 END)::HUGEINT AS on_demand_us,
    SUM(CASE WHEN n_down = 0 AND n_od = 0 THEN seg_end - seg_start ELSE 0 END)::HUGEINT AS spot_us
FROM segments
GROUP BY ALL
"""

# A group gets a line when it has an interval, even if credits leave it nothing to bill.
USAGE = """
SELECT g.tenant, g.model, g.is_spot, SUM(CASE WHEN g.is_spot = 1 THEN p.spot_us ELSE p.on_demand_us END)::HUGEINT
FROM (SELECT DISTINCT tenant, gpu, model, is_spot FROM held) g
JOIN per_gpu p USING (tenant, gpu, model)
GROUP BY ALL
"""

CREDITED = "SELECT tenant, SUM(credited_us)::HUGEINT FROM per_gpu GROUP BY ALL"

TOTALS = """
SELECT (SELECT COALESCE(SUM(ce - cs), 0)::HUGEINT FROM held),
    (SELECT COALESCE(SUM(overlap_us), 0)::HUGEINT FROM per_gpu)
"""


def overage(key: PackedKey) -> str:
    """Step 6: n(t), the count of a tenant's GPUs of the model with billed on-demand time at t,
    swept per commitment (``cid``, its row) on one packed key, and max(0, n(t) - R) integrated.

    A GPU's stretches are disjoint, so (key, gpu, d) is unique. A commitment's last edge has
    n(t) = 0, so the length reaching into the next commitment is multiplied by nothing.
    """
    return f"""
WITH billed AS (
    SELECT c.cid, s.gpu, s.seg_start, s.seg_end
    FROM segments s JOIN commitments c USING (tenant, model)
    WHERE s.n_od > 0 AND s.n_down = 0
), edges AS (
    SELECT {key.pack("cid", "seg_start")} AS key, gpu, 1 AS d FROM billed
    UNION ALL
    SELECT {key.pack("cid", "seg_end")}, gpu, -1 FROM billed
), counted AS (
    SELECT {key.group("key")} AS cid, LEAD(key) OVER w - key AS len, SUM(d) OVER w AS n_gpus
    FROM edges
    WINDOW w AS (ORDER BY key, gpu, d ROWS UNBOUNDED PRECEDING)
)
SELECT c.tenant, c.model,
    COALESCE(SUM((u.n_gpus - c.gpus) * u.len) FILTER (WHERE u.n_gpus > c.gpus AND u.len > 0), 0)::HUGEINT
FROM commitments c LEFT JOIN counted u USING (cid)
GROUP BY ALL
"""


def breaches(key: PackedKey) -> str:
    """Step 5, on packed ``(gm, t)`` keys. First the GPUs where one tenant's stretch starts before
    another's has ended (a tenant's own stretches never overlap, so any overlap is between
    tenants; (key, tenant) is unique). Only there, a sweep over the held stretches counts
    tenants; two or more at once is a breach. Breach stretches lie between consecutive edges:
    each held stretch contains one or misses it.
    """
    return f"""
CREATE TEMP TABLE breaches AS
WITH shared AS (
    SELECT DISTINCT gm FROM (
        SELECT gm, sk < MAX(ek) OVER (ORDER BY sk, tenant ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
            AS overlaps_earlier
        FROM (SELECT gm, tenant, {key.pack("gm", "seg_start")} AS sk, {key.pack("gm", "seg_end")} AS ek FROM segments)
    )
    WHERE overlaps_earlier
), cover AS (
    SELECT tenant, gpu, model, gm, seg_start, seg_end FROM segments SEMI JOIN shared USING (gm)
), edges AS (
    SELECT {key.pack("gm", "seg_start")} AS key, tenant, 1 AS d FROM cover
    UNION ALL
    SELECT {key.pack("gm", "seg_end")}, tenant, -1 FROM cover
), counted AS (
    SELECT key, LEAD(key) OVER w AS next_key, SUM(d) OVER w AS n_tenants
    FROM edges
    WINDOW w AS (ORDER BY key, tenant, d ROWS UNBOUNDED PRECEDING)
), stretches AS (
    SELECT {key.group("key")} AS gm, {key.time("key")} AS b_start, {key.time("next_key")} AS b_end
    FROM counted
    WHERE n_tenants >= 2 AND next_key > key
)
SELECT c.gpu, c.model, b.b_start, b.b_end, c.tenant
FROM stretches b
JOIN cover c ON c.gm = b.gm AND c.seg_start <= b.b_start AND b.b_end <= c.seg_end
"""


BREACH_SECONDS = "SELECT tenant, gpu, model, SUM(b_end - b_start)::HUGEINT FROM breaches GROUP BY ALL"

BREACH_PARTNERS = """
SELECT DISTINCT a.tenant, a.gpu, a.model, o.tenant
FROM breaches a JOIN breaches o ON o.gpu = a.gpu AND o.model = a.model AND o.b_start = a.b_start
    AND o.tenant <> a.tenant
"""

BREACH_EVENTS = """
SELECT DISTINCT h.tenant, h.gpu, h.model, h.start_id, h.stop_id
FROM held h JOIN breaches b ON b.tenant = h.tenant AND b.gpu = h.gpu AND b.model = h.model
    AND h.cs < b.b_end AND b.b_start < h.ce
"""

OVERLAP_SECONDS = "SELECT tenant, gpu, model, overlap_us FROM per_gpu WHERE overlap_us > 0"

# Intervals overlapping another of the same tenant and GPU: sorted by start, one overlaps an
# earlier one when it starts before the latest end so far, a later one when the next start is
# before its end.
OVERLAPPING = """
SELECT tenant, gpu, model, start_id, stop_id FROM (
    SELECT h.*,
        COALESCE(cs < MAX(ce) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), false)
        OR COALESCE(LEAD(cs) OVER w < ce, false) AS overlaps_another
    FROM held h SEMI JOIN (SELECT * FROM per_gpu WHERE overlap_us > 0) p USING (tenant, gpu, model)
    WINDOW w AS (PARTITION BY tenant, gpu, model ORDER BY cs, ce, rid)
)
WHERE overlaps_another
"""

UNPRICED_EVENTS = """
SELECT h.tenant, h.model, h.is_spot, h.start_id, h.stop_id
FROM held h SEMI JOIN unpriced_groups g USING (tenant, model, is_spot)
"""


def union_by_group(table: str, key: PackedKey) -> str:
    """The union per group of ``table(g, start_us, end_us, rid)`` in one sorted pass.

    Sorted by start, an interval adds exactly its part beyond the latest end before it
    (everything from its start up to that end is already covered). One packed key instead of
    ``PARTITION BY g ORDER BY start_us``: the running maximum of packed ends never carries into
    the next group. The sum does not depend on the order among equal starts; ``rid`` (unique)
    makes the order unique anyway.
    """
    return f"""
SELECT {key.group("sk")} AS g, SUM(GREATEST(ek - GREATEST(sk, COALESCE(reach, sk)), 0))::BIGINT AS union_us
FROM (
    SELECT sk, ek, MAX(ek) OVER (ORDER BY sk, rid ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM (SELECT {key.pack("g", "start_us")} AS sk, {key.pack("g", "end_us")} AS ek, rid FROM {table})
)
GROUP BY 1
"""


def intersection_by_group(table: str, key: PackedKey) -> str:
    """Per group g, ``U(3 g) + U(3 g + 1) - U(3 g + 2)`` from the unions of ``table``'s groups:
    |a & b| by inclusion-exclusion when groups 3 g, 3 g + 1 and 3 g + 2 hold a, b and both."""
    return f"""
SELECT g // 3 AS g, SUM(CASE WHEN g % 3 = 2 THEN -union_us ELSE union_us END)::BIGINT AS intersection_us
FROM ({union_by_group(table, key)})
GROUP BY 1
"""
