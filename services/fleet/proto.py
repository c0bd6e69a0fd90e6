"""The protobuf forms of instructions, statuses and action results (translation and the
checks of what agents send; no rules)."""

from __future__ import annotations

import json
import math

from google.protobuf import json_format

from gpucloud.v1 import agent_pb2
from services.fabric.partitions import DEFAULT_PARTITION_KEY
from services.fleet.actions import SCRUB_STEPS, ActionKind
from services.fleet.burn_in import FIGURES
from services.fleet.directives import Instructions
from services.fleet.repository import ResultRecord
from services.health.signals import GpuReading
from services.nodes.proto import NODE_STATE_TO_PROTO
from services.nodes.repository import GpuDetails
from services.validation import Violations

ACTION_KIND_TO_PROTO = {k: agent_pb2.ActionKind.Value(f"ACTION_KIND_{k.name}") for k in ActionKind}
ACTION_KIND_FROM_PROTO = {number: kind for kind, number in ACTION_KIND_TO_PROTO.items()}
# The result each kind of action reports, by the name of its field in ActionResult's oneof.
RESULT_FIELD = {ActionKind.BURN_IN: "burn_in", ActionKind.SCRUB: "scrub"}

MAX_RESULTS = 8
MAX_LIST = 32
# An XID's journal number is stored negated in health_observations.seq, a 32-bit integer.
MAX_JOURNAL_SEQ = 2**31 - 1
GPU_TEXT_LIMITS = {"name": 96, "serial": 64, "driver_version": 32, "vbios_version": 32, "inforom_version": 32}


def instructions_to_proto(instructions: Instructions) -> agent_pb2.Instructions:
    """The API form of what an agent is told."""
    return agent_pb2.Instructions(
        desired_state=NODE_STATE_TO_PROTO[instructions.desired_state],
        actions=[
            agent_pb2.Action(action_id=a.action_id, kind=ACTION_KIND_TO_PROTO[a.kind]) for a in instructions.actions
        ],
        heartbeat_interval_ms=instructions.heartbeat_interval_ms,
        partition_keys=instructions.partition_keys,
    )


def gpu_details(v: Violations, request: agent_pb2.RegisterAgentRequest) -> list[tuple[int, GpuDetails]]:
    """Each GPU's description, by index; each field too long is a violation in ``v``."""
    details = []
    for i, gpu in enumerate(request.gpus):
        for name, limit in GPU_TEXT_LIMITS.items():
            v.text(f"gpus[{i}].{name}", getattr(gpu, name), max_length=limit)
        if gpu.memory_bytes < 0:
            v.add(f"gpus[{i}].memory_bytes", "must not be negative")
        if not 0 <= gpu.rail < 1024:
            v.add(f"gpus[{i}].rail", "must be 0-1023")
        details.append(
            (
                gpu.index,
                GpuDetails(
                    name=gpu.name or None,
                    serial=gpu.serial or None,
                    memory_bytes=gpu.memory_bytes or None,
                    driver_version=gpu.driver_version or None,
                    vbios_version=gpu.vbios_version or None,
                    inforom_version=gpu.inforom_version or None,
                    rail=gpu.rail,
                ),
            )
        )
    return details


def checked_status(v: Violations, status: agent_pb2.NodeStatus) -> str:
    """The status as stored (JSON); each malformed field is a violation in ``v``."""
    indexes = set()
    if len(status.gpus) > 8:
        v.add("status.gpus", "at most 8 GPUs")
    for i, gpu in enumerate(status.gpus):
        path = f"status.gpus[{i}]"
        if not 0 <= gpu.index < 8 or gpu.index in indexes:
            v.add(f"{path}.index", "must be a distinct index 0-7")
        indexes.add(gpu.index)
        if len(gpu.throttle_reasons) > MAX_LIST or len(gpu.xid_codes) > MAX_LIST:
            v.add(path, f"at most {MAX_LIST} throttle reasons and {MAX_LIST} XID codes")
        for j, reason in enumerate(gpu.throttle_reasons):
            v.text(f"{path}.throttle_reasons[{j}]", reason, max_length=64, required=True)
        _check_xids(v, path, gpu)
        if gpu.ecc_corrected_total < 0 or gpu.ecc_uncorrected_total < 0:
            v.add(path, "ECC counts must not be negative")
    keys = list(status.partition_keys)
    if len(keys) > MAX_LIST:
        v.add("status.partition_keys", f"at most {MAX_LIST} partitions")
    elif len(set(keys)) != len(keys) or not all(0 < key <= DEFAULT_PARTITION_KEY for key in keys):
        v.add("status.partition_keys", f"must be distinct partition keys 1-{DEFAULT_PARTITION_KEY}")
    return json_format.MessageToJson(status, sort_keys=True, indent=None)


def _check_xids(v: Violations, path: str, gpu: agent_pb2.GpuStatus) -> None:
    """A GPU's XID codes, with a time and a journal number for each or for none."""
    if any(code < 0 for code in gpu.xid_codes):
        v.add(f"{path}.xid_codes", "must not be negative")
    if gpu.xid_times_ms and len(gpu.xid_times_ms) != len(gpu.xid_codes):
        v.add(f"{path}.xid_times_ms", "must give one time for each of xid_codes, or none")
    if gpu.xid_seqs and (len(gpu.xid_seqs) != len(gpu.xid_codes) or len(gpu.xid_times_ms) != len(gpu.xid_codes)):
        v.add(f"{path}.xid_seqs", "must give one number for each of xid_codes, with their times, or none")
    elif not all(0 < seq <= MAX_JOURNAL_SEQ for seq in gpu.xid_seqs):
        v.add(f"{path}.xid_seqs", f"must be journal sequence numbers 1-{MAX_JOURNAL_SEQ:,}")


def checked_results(v: Violations, results: list[agent_pb2.ActionResult]) -> list[ResultRecord]:
    """The results as stored; each malformed field is a violation in ``v``."""
    if len(results) > MAX_RESULTS:
        v.add("results", f"at most {MAX_RESULTS} results a report")
    records = []
    for i, result in enumerate(results):
        path = f"results[{i}]"
        v.text(f"{path}.action_id", result.action_id, max_length=64, required=True)
        v.text(f"{path}.error", result.error, max_length=256)
        kind = ACTION_KIND_FROM_PROTO.get(result.kind)
        if kind is None:
            v.add(f"{path}.kind", "must be a known action kind")
            continue
        field = RESULT_FIELD[kind]
        if result.error:
            records.append(ResultRecord(result.action_id, kind.value, "{}", result.error))
            continue
        if result.WhichOneof("result") != field:
            v.add(f"{path}.{field}", f"a {kind.value} result needs {field} (or an error)")
            continue
        if kind is ActionKind.BURN_IN:
            figures = {name: getattr(result.burn_in, name) for name in FIGURES}
            for name, value in figures.items():
                if not (math.isfinite(value) and value > 0):
                    v.add(f"{path}.burn_in.{name}", "must be a finite number above 0")
            payload: dict[str, float | bool] = dict(figures)
        else:
            payload = {name: getattr(result.scrub, name) for name in SCRUB_STEPS}
        records.append(ResultRecord(result.action_id, kind.value, json.dumps(payload, sort_keys=True), ""))
    return records


def gpu_readings(status: agent_pb2.NodeStatus) -> list[GpuReading]:
    """The GPUs of a status as the health signals read them."""
    return [
        GpuReading(
            gpu.index,
            gpu.present,
            frozenset(gpu.throttle_reasons),
            tuple(gpu.xid_codes),
            tuple(gpu.xid_times_ms),
            tuple(gpu.xid_seqs),
            gpu.ecc_corrected_total,
            gpu.ecc_uncorrected_total,
            gpu.remapped_rows_pending,
            gpu.remapped_rows_failure,
        )
        for gpu in status.gpus
    ]


def stored_readings(status_json: str) -> list[GpuReading]:
    """The GPUs of a status as stored (``checked_status``'s JSON)."""
    return gpu_readings(json_format.Parse(status_json, agent_pb2.NodeStatus()))
