"""How an ingest's work is cut up: big Kineto files into parts, small
sources into groups, and when workers are worth starting at all.

Pure planning over `Source`s and their sizes, apart from the code that
runs the tasks (`pool`) and the code that parses and writes them (`batch`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Iterable

from gpulens.collector.cpus import usable_cpus
from gpulens.collector.errors import TraceError
from gpulens.collector.ingest.buffer import content_bytes, is_gzip
from gpulens.collector.ingest.formats import detect_format
from gpulens.collector.ingest.sources import FilePart

if TYPE_CHECKING:
    from gpulens.collector.ingest.sources import Source

# Below this much trace content in all (decompressed), one process parses
# everything: a forked worker's pool takes ~12 ms to start and stop and, by
# RSS, another ~75 MB (the imported modules it shares with this process),
# more than it saves on a few MB. Two 1.7 MB Kineto files took 0.54 s in
# two processes and 0.62 s in one (medians of 5, noise ±0.1 s) at 180 vs
# 108 MB; 13 MB in three files took 0.82 vs 0.94 s, worth the worker.
PARALLEL_MIN_CONTENT_BYTES = 8 << 20
# The least content a part of a split file is given (see `_split_big_files`):
# four 2 MiB batches, so its fixed costs (a task, its columns pickled back)
# stay small beside its parsing.
SPLIT_MIN_PART_BYTES = 8 << 20
# The most parts one file is cut into, however many cores there are. The
# parts share out only the reading of events; one process then joins them
# and builds, derives and writes the file's tables alone, so past a
# few parts the reading is no longer what it waits for, while each part's
# process costs its memory (70-100 MiB by RSS) and, in a gzip file, reads
# the content before its own again. On a 16-core Xeon VM a real
# 454,488-event H100 trace (149 MB of JSON) took 1.42 s with --jobs 1, 1.40
# with 4 and 1.34 with 16 (17 parts), at 180, 434 and 1,347 MiB of RSS.
MAX_PARTS_A_FILE = 4
# A command of at least this many small sources writes them in groups
# (`group_small_sources`): fewer would gain little, and re-ingesting one
# source of a group rewrites the group's other sources (`merge._explode`).
GROUP_MIN_SOURCES = 16
# A source bigger than this (content) is written on its own: its own costs
# outweigh a file's fixed ones.
GROUP_SOURCE_MAX_BYTES = 8 << 20
# At most this many sources and this much content a group: the group's
# tables are held in memory together until written. Past eight a group the
# writing gains little (64 ranks of 5,000 events: 17.7 ms of writing a rank
# alone, 6.1 in fours, 4.0 in eights, 3.0 in sixteens); sixteen halves the
# files a run of thousands of ranks leaves.
GROUP_MAX_SOURCES = 16
GROUP_MAX_BYTES = 64 << 20


def _task_sizes(tasks: Iterable[Source], file_sizes: dict[str, int] | None) -> dict[Source, int]:
    """Each task's content in bytes: its files' `content_bytes`, taken from
    `file_sizes` where given."""
    size_of = file_sizes.__getitem__ if file_sizes is not None else content_bytes
    return {task: sum(map(size_of, task.files)) for task in tasks}


def _split_big_files(tasks: list[Source], jobs: int | None, file_sizes: dict[str, int] | None = None) -> list[Source]:
    """The tasks, with each Kineto file of at least one and a half cores'
    share of the work cut into parts that processes read at once
    (`kineto.read_part`).

    A file is read by one process otherwise, so one big trace (or one big
    rank beside small ones) would keep the other cores idle. A file no
    bigger than about a core's share is left whole: its core reads it while
    the others read theirs, and cutting it only adds the joining (two
    80 MB ranks on two cores: 0.49 s whole, 0.59-0.61 s in two parts
    each). A file cut gets parts of about half a core's share, at most
    MAX_PARTS_A_FILE, at least SPLIT_MIN_PART_BYTES each: halves, because
    equal bytes are not equal work (a simulated rank's halves took 177 and
    220 ms), and smaller parts let the cores even it out (that rank alone
    on two cores: 0.59 s in four parts, 0.62 s in two; medians of 7). A
    gzip file gets parts of a core's share instead: gzip cannot seek, so
    each part decompresses all the content before its own, and in four
    parts the whole file is decompressed two and a half times (the same
    rank gzipped: 0.78 s in two parts, 0.87 s in four; the A100 + V100
    pair, the V100 trace in two: 0.36 s, in three 0.38; medians of 9-15).
    """
    # More parts than the cores can take only add work (a gzip file's parts
    # each decompress what comes before them): --jobs 4 on two cores read a
    # 620,000-event .json.gz in 2.8-3.1 s in eight parts, 2.3 s in four.
    cores = min(jobs, usable_cpus()) if jobs else usable_cpus()
    if cores < 2:
        return tasks
    sizes = _task_sizes(tasks, file_sizes)
    total = sum(sizes.values())
    if total < PARALLEL_MIN_CONTENT_BYTES:
        return tasks
    share = total / cores
    planned: list[Source] = []
    for task in tasks:
        size = sizes[task]
        count = 1
        if 2 * size >= 3 * share and not task.parts and _is_kineto(task.path):
            per_share = 1 if is_gzip(task.path) else 2
            count = min(MAX_PARTS_A_FILE, size // SPLIT_MIN_PART_BYTES, round(per_share * size / share))
        if count < 2:
            planned.append(task)
            continue
        starts = [size * i // count for i in range(count)]
        ends: list[int | None] = [*starts[1:], None]
        planned.extend(replace(task, part=FilePart(i, count, starts[i], ends[i])) for i in range(count))
    return planned


def group_small_sources(tasks: list[Source], jobs: int | None,
                        file_sizes: dict[str, int] | None = None) -> list[Source]:
    """The tasks, with the small whole sources of a command of many put in
    groups that one process parses and writes together (`ingest_group`).

    Groups are of consecutive sources by path, so that ingesting the same
    files again on the same machine forms the same groups, and each group's
    files replace the last ingest's whole rather than split them apart
    (`merge._explode`). There are at least four groups a core, so the cores
    still share out the work evenly to the end.
    """
    sizes = _task_sizes((task for task in tasks if task.part is None), file_sizes)
    small = sorted((task for task, size in sizes.items() if size <= GROUP_SOURCE_MAX_BYTES), key=lambda t: t.path)
    if len(small) < GROUP_MIN_SOURCES:
        return tasks
    cores = min(jobs, usable_cpus()) if jobs else usable_cpus()
    per_group = min(GROUP_MAX_SOURCES, len(small) // (4 * cores))
    if per_group < 2:
        return tasks
    groups: list[list[Source]] = [[]]
    content = 0
    for task in small:
        if len(groups[-1]) == per_group or (groups[-1] and content + sizes[task] > GROUP_MAX_BYTES):
            groups.append([])
            content = 0
        groups[-1].append(task)
        content += sizes[task]
    grouped = set(small)
    return [task for task in tasks if task not in grouped] + [
        replace(group[0], group=tuple(group)) if len(group) > 1 else group[0] for group in groups]


def _is_kineto(path: str) -> bool:
    try:
        return detect_format(path) == "kineto"
    except TraceError:
        return False
