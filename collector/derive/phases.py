"""gpu_phases: each device's time of a rank tiled by phase.

'compute' when any compute kernel runs, else 'communication', else
'memory', else 'idle'; rows are cut at multiples of 2^bucket_bits ns and
carry the time of each phase before them, so the time of a phase up to any
instant is one lookup (collector.derive computes them at ingest).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpulens.collector.derive.inputs import COMMUNICATION, COMPUTE, MEMORY, PHASE_NAMES, _RankKernels, _StepWindows
from gpulens.collector.schema import GPU_PHASES_SCHEMA


# Phase rows are cut at every multiple of 2^PHASE_BUCKET_BITS ns (about
# 17 ms), so a time's row is found by an equality join on its bucket, not a
# sort. A device whose span would take more than PHASE_MAX_BUCKETS buckets
# (2.4 hours) gets wider ones: one kernel with a bogus time 51 days away
# tiled 266 million rows and took 24 GB.
PHASE_BUCKET_BITS = 24
PHASE_BUCKET_NS = 1 << PHASE_BUCKET_BITS
PHASE_MAX_BUCKETS = 1 << 19
_IDLE = 3


def bucket_bits(low_ns: int, high_ns: int) -> int:
    """The bucket width (as a power of two, in ns) for tiling [low, high):
    2^24, or the narrowest wider one that keeps to PHASE_MAX_BUCKETS."""
    bits = PHASE_BUCKET_BITS
    while ((high_ns - 1) >> bits) - (low_ns >> bits) + 1 > PHASE_MAX_BUCKETS:
        bits += 1
    return bits


def _phases(rank: _RankKernels, key: tuple[str | None, int | None], summary: dict,
            steps: _StepWindows) -> list[pa.Table]:
    """Per device of the rank, its time tiled by phase: a sweep over kernel
    edges, idle gaps filled in, cut at bucket bounds, with the time of each
    phase before each row. The rank's main device is tiled over the window
    energy analyses use (its kernels and the profiler steps)."""
    tables = []
    keep = rank.valid & (rank.end > rank.start) & rank.device_valid
    devices = np.unique(rank.device[keep]) if keep.any() else np.empty(0, dtype=np.int64)
    main = summary.get("main_device")
    if main is not None and main not in devices:
        devices = np.append(devices, main)
    for device in devices:
        on = np.flatnonzero(keep & (rank.device == device))
        s, e, code = rank.start[on], rank.end[on], rank.category[on].astype(np.int64)
        times = np.concatenate((s, e))
        # in-flight counts packed in one number, 20 bits per kind
        weight = np.left_shift(np.int64(1), 20 * code)
        delta = np.concatenate((weight, -weight))
        order = np.argsort(times, kind="stable")
        times, running = times[order], np.cumsum(delta[order])
        phase = np.where(running & 0xFFFFF, COMPUTE,
                         np.where((running >> 20) & 0xFFFFF, COMMUNICATION,
                                  np.where(running >> 40, MEMORY, _IDLE)))
        # Segment i runs from edge i to edge i+1; the last edge at an instant
        # has the full counts, the others give empty segments.
        seg_start, seg_end, seg_phase = times[:-1], times[1:], phase[:-1]
        real = seg_end > seg_start
        seg_start, seg_end, seg_phase = seg_start[real], seg_end[real], seg_phase[real]
        low = int(seg_start[0]) if len(seg_start) else None
        high = int(seg_end[-1]) if len(seg_end) else None
        if device == main:
            bounds = [v for v in (summary.get("main_device_start_ns"), summary.get("main_device_end_ns")) if v is not None]
            if len(steps.merged_start):
                bounds += [int(steps.merged_start.min()), int(steps.merged_end.max())]
            if bounds:
                low = min(bounds + ([low] if low is not None else []))
                high = max(bounds + ([high] if high is not None else []))
        if low is None or high is None or high <= low:
            continue
        # Idle before the first kernel and after the last, where the window is wider.
        if len(seg_start):
            seg_start, seg_end = (np.concatenate(([low], seg_start, [seg_end[-1]])),
                                  np.concatenate(([seg_start[0]], seg_end, [high])))
            seg_phase = np.concatenate(([_IDLE], seg_phase, [_IDLE]))
        else:
            seg_start, seg_end, seg_phase = np.array([low]), np.array([high]), np.array([_IDLE])
        real = seg_end > seg_start
        seg_start, seg_end, seg_phase = seg_start[real], seg_end[real], seg_phase[real]
        # Merge touching rows of one phase, then cut them at bucket bounds.
        opens = np.ones(len(seg_start), dtype=bool)
        opens[1:] = (seg_start[1:] != seg_end[:-1]) | (seg_phase[1:] != seg_phase[:-1])
        first = np.flatnonzero(opens)
        last = np.append(first[1:] - 1, len(seg_start) - 1)
        start_ns, end_ns, phase_code = seg_start[first], seg_end[last], seg_phase[first]
        bits = bucket_bits(low, high)
        first_bucket = start_ns >> bits
        pieces = ((end_ns - 1) >> bits) - first_bucket + 1
        row = np.repeat(np.arange(len(start_ns)), pieces)
        bucket = first_bucket[row] + (np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces))
        piece_start = np.maximum(start_ns[row], bucket << bits)
        piece_end = np.minimum(end_ns[row], (bucket + 1) << bits)
        piece_phase = phase_code[row]
        length = piece_end - piece_start
        before = {}
        for name, code_value in (("compute_before_ns", COMPUTE), ("communication_before_ns", COMMUNICATION),
                                 ("memory_before_ns", MEMORY)):
            of_phase = np.where(piece_phase == code_value, length, 0)
            before[name] = np.cumsum(of_phase) - of_phase
        count = len(piece_start)
        tables.append(pa.Table.from_arrays([
            pa.array([key[0]] * count, pa.string()),
            pa.array([key[1]] * count, pa.int32()),
            pa.array(np.full(count, device), pa.int32()),
            pa.array(np.array(PHASE_NAMES + ("idle",), dtype=object)[piece_phase], pa.string()),
            pa.array(piece_start, pa.int64()),
            pa.array(piece_end, pa.int64()),
            pa.array(length, pa.int64()),
            pa.array(bucket, pa.int64()),
            pa.array(np.full(count, bits), pa.int8()),
            pa.array(before["compute_before_ns"], pa.int64()),
            pa.array(before["communication_before_ns"], pa.int64()),
            pa.array(before["memory_before_ns"], pa.int64()),
        ], schema=GPU_PHASES_SCHEMA))
    return tables
