"""The SQL of the DuckDB engine, one statement per step, in the order ``engine.py`` runs them.

Inputs, registered from Arrow by ``engine.py``:

* ``raw_events(seq, event_id, tenant, alloc, gpu, model, is_stop, at_us, is_spot)``: ``seq`` is
  the input position; tenant, allocation, GPU and model are integer codes of their strings
  (hashing and sorting integers is several times cheaper than strings; the engine decodes the
  results), ``event_id`` stays a string because its order breaks ties.
* ``raw_outages(seq, gpu, start_us, end_us)`` with the same GPU codes.
* ``commitments(tenant, model, gpus)``.
* variables ``p0`` and ``p1``: the period ``[p0, p1)``.

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

# Each opening start with its run's closing stop (none: never stopped), and step 3: the span
# [cs, ce) clipped to the period. An empty span lies outside the period (or has zero length).
# The interval takes its model and price class from its start.
PAIRS = """
CREATE TEMP TABLE pairs AS
SELECT o.seq AS rid, o.tenant, o.alloc, o.gpu, o.model, o.is_spot,
    o.event_id AS start_id, o.at_us AS start_us, c.event_id AS stop_id, c.at_us AS stop_us,
    GREATEST(o.at_us, getvariable('p0')) AS cs,
    LEAST(COALESCE(c.at_us, getvariable('p1')), getvariable('p1')) AS ce
FROM steps o
LEFT JOIN steps c ON c.role = 'close' AND c.tenant = o.tenant AND c.alloc = o.alloc AND c.gpu = o.gpu AND c.k = o.k
WHERE o.role = 'open'
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
FROM steps WHERE role IN ('duplicate_start', 'orphan_stop')
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
SELECT {_event_columns("s")} FROM steps s WHERE s.role = 'orphan_stop' AND {IN_PERIOD.format("s.at_us")}
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

# Step 4, the sweep per (tenant, GPU): counters of held intervals, on-demand ones, and outages
# (each outage of a GPU is replayed for every tenant that held it). Tiebreakers are unique:
# rid and oid are input positions, and the low two bits say which edge of what.
EDGES = """
CREATE TEMP TABLE edges AS
WITH tenant_gpus AS (SELECT DISTINCT tenant, gpu, model FROM held)
SELECT tenant, gpu, model, cs AS t, 1 AS d_held, 1 - is_spot AS d_od, 0 AS d_down, rid * 4 AS tie FROM held
UNION ALL
SELECT tenant, gpu, model, ce, -1, is_spot - 1, 0, rid * 4 + 1 FROM held
UNION ALL
SELECT k.tenant, k.gpu, k.model, o.s, 0, 0, 1, o.oid * 4 + 2 FROM tenant_gpus k JOIN outage_spans o USING (gpu)
UNION ALL
SELECT k.tenant, k.gpu, k.model, o.e, 0, 0, -1, o.oid * 4 + 3 FROM tenant_gpus k JOIN outage_spans o USING (gpu)
"""

# The stretches a tenant held a GPU, each with its counters. Ties yield zero-length stretches,
# dropped here, so the order among tied edges cannot change a total.
SEGMENTS = """
CREATE TEMP TABLE segments AS
SELECT * FROM (
    SELECT tenant, gpu, model, t AS seg_start, LEAD(t) OVER w AS seg_end,
        SUM(d_held) OVER w AS n_held, SUM(d_od) OVER w AS n_od, SUM(d_down) OVER w AS n_down
    FROM edges
    WINDOW w AS (PARTITION BY tenant, gpu, model ORDER BY t, tie ROWS UNBOUNDED PRECEDING)
)
WHERE seg_end > seg_start AND n_held > 0
"""

# Per tenant and GPU: the overlap counted once, the credit, and on-demand precedence over spot.
PER_GPU = """
CREATE TEMP TABLE per_gpu AS
SELECT tenant, gpu, model,
    SUM((n_held - 1) * (seg_end - seg_start))::BIGINT AS overlap_us,
    SUM(CASE WHEN n_down > 0 THEN seg_end - seg_start ELSE 0 END)::BIGINT AS credited_us,
    SUM(CASE WHEN n_down = 0 AND n_od > 0 THEN seg_end - seg_start ELSE 0 END)::BIGINT AS on_demand_us,
    SUM(CASE WHEN n_down = 0 AND n_od = 0 THEN seg_end - seg_start ELSE 0 END)::BIGINT AS spot_us
FROM segments
GROUP BY ALL
"""

# A group gets a line when it has an interval, even if credits leave it nothing to bill.
USAGE = """
SELECT g.tenant, g.model, g.is_spot, SUM(CASE WHEN g.is_spot = 1 THEN p.spot_us ELSE p.on_demand_us END)::BIGINT
FROM (SELECT DISTINCT tenant, gpu, model, is_spot FROM held) g
JOIN per_gpu p USING (tenant, gpu, model)
GROUP BY ALL
"""

CREDITED = "SELECT tenant, SUM(credited_us)::BIGINT FROM per_gpu GROUP BY ALL"

TOTALS = """
SELECT (SELECT COALESCE(SUM(ce - cs), 0)::BIGINT FROM held), (SELECT COALESCE(SUM(overlap_us), 0)::BIGINT FROM per_gpu)
"""

# Step 6: n(t) is the count of a tenant's GPUs of the model with billed on-demand time at t.
# A GPU's stretches are disjoint, so (t, gpu, d) is unique within a (tenant, model).
OVERAGE = """
WITH billed AS (
    SELECT s.tenant, s.model, s.gpu, s.seg_start, s.seg_end
    FROM segments s SEMI JOIN commitments c USING (tenant, model)
    WHERE s.n_od > 0 AND s.n_down = 0
), edges AS (
    SELECT tenant, model, gpu, seg_start AS t, 1 AS d FROM billed
    UNION ALL
    SELECT tenant, model, gpu, seg_end, -1 FROM billed
), counted AS (
    SELECT tenant, model, LEAD(t) OVER w - t AS len, SUM(d) OVER w AS n_gpus
    FROM edges
    WINDOW w AS (PARTITION BY tenant, model ORDER BY t, gpu, d ROWS UNBOUNDED PRECEDING)
)
SELECT c.tenant, c.model, COALESCE(SUM(GREATEST(u.n_gpus - c.gpus, 0) * u.len) FILTER (WHERE u.len > 0), 0)::BIGINT
FROM commitments c LEFT JOIN counted u USING (tenant, model)
GROUP BY ALL
"""

# Step 5. First the GPUs where one tenant's stretch starts before another's has ended (a
# tenant's own stretches never overlap, so any overlap is between tenants); (seg_start,
# tenant) is unique per GPU. Only there, a second sweep over the held stretches counts tenants;
# two or more at once is a breach.
BREACHES = """
CREATE TEMP TABLE breaches AS
WITH shared AS (
    SELECT DISTINCT gpu, model FROM (
        SELECT gpu, model, seg_start < MAX(seg_end) OVER (
            PARTITION BY gpu, model ORDER BY seg_start, tenant ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS overlaps_earlier
        FROM segments
    )
    WHERE overlaps_earlier
), cover AS (
    SELECT tenant, gpu, model, seg_start, seg_end FROM segments SEMI JOIN shared USING (gpu, model)
), edges AS (
    SELECT gpu, model, tenant, seg_start AS t, 1 AS d FROM cover
    UNION ALL
    SELECT gpu, model, tenant, seg_end, -1 FROM cover
), counted AS (
    SELECT gpu, model, t AS b_start, LEAD(t) OVER w AS b_end, SUM(d) OVER w AS n_tenants
    FROM edges
    WINDOW w AS (PARTITION BY gpu, model ORDER BY t, tenant, d ROWS UNBOUNDED PRECEDING)
)
SELECT b.gpu, b.model, b.b_start, b.b_end, c.tenant
FROM counted b
-- Breach stretches lie between consecutive edges: each held stretch contains one or misses it.
JOIN cover c ON c.gpu = b.gpu AND c.model = b.model AND c.seg_start <= b.b_start AND b.b_end <= c.seg_end
WHERE b.n_tenants >= 2 AND b.b_end > b.b_start
"""

BREACH_SECONDS = "SELECT tenant, gpu, model, SUM(b_end - b_start)::BIGINT FROM breaches GROUP BY ALL"

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

# A bare table ``{table}`` of (gpu_id, start_us, end_us): the union per GPU in one sorted pass.
# Sorted by start, an interval adds exactly its part beyond the latest end before it (everything
# from its start up to that end is already covered). The sum does not depend on the order among
# equal starts; ``rowid`` makes the order unique anyway.
UNION_BY_GPU = """
SELECT gpu_id, SUM(GREATEST(end_us - GREATEST(start_us, COALESCE(prev_end, start_us)), 0))::BIGINT AS union_us
FROM (
    SELECT gpu_id, start_us, end_us, MAX(end_us) OVER (
        PARTITION BY gpu_id ORDER BY start_us, end_us, rowid ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS prev_end
    FROM {table}
)
GROUP BY gpu_id
"""

# |usage & outages| = |usage| + |outages| - |usage | outages|, each a union by UNION_BY_GPU,
# on the GPUs that have an outage.
INTERSECTION_BY_GPU = f"""
SELECT o.gpu_id, (COALESCE(u.union_us, 0) + o.union_us - b.union_us)::BIGINT AS intersection_us
FROM ({UNION_BY_GPU.format(table="bare_outages")}) o
LEFT JOIN ({UNION_BY_GPU.format(table="bare_usage")}) u USING (gpu_id)
JOIN ({UNION_BY_GPU.format(table="bare_both")}) b USING (gpu_id)
ORDER BY o.gpu_id
"""
