"""Read trace files as decompressed chunks, or as one buffer, gzip or not.

`iter_chunks` yields the decompressed content about 1 MiB at a time, so a
reader that can work on pieces never holds the whole decompressed file
(the Kineto reader streams its events this way). `read_buffer` returns it
all in one `bytearray`: a plain file read straight into it, a gzip file's
sized from its trailer (ISIZE), so the peak is the decompressed size plus
the compressed file, not the twice-the-size peak of `gzip.GzipFile.read()`
joining its chunks. Multi-member gzip and files over 4 GiB (ISIZE is the
size mod 2**32) work; the buffer grows. Unreadable or truncated input is
a TraceError naming the file.

gzip is decompressed by zlib-ng where it is installed (a dependency, with
the standard library's zlib as the fallback on a platform without its
wheel): the same streams about three times as fast (the 54 MB V100 trace:
73 → 24 ms), and PyTorch's `tensorboard_trace_handler` writes `.json.gz`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Iterator

from gpulens.collector.errors import TraceError

try:
    from zlib_ng import zlib_ng as zlib
except ImportError:  # no wheel for this platform: the same API, slower
    import zlib  # type: ignore[no-redef]

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 1 << 20

# A gzip file may decompress to at most this many times its own size, and
# always to MIN_LIMIT_BYTES: traces compress 10-25 times (JSON), a gzip bomb
# of whitespace 1,000 times. `gpulens ingest --max-trace-bytes` (which sets
# GPULENS_MAX_TRACE_BYTES, inherited by the workers) replaces the limit.
MAX_RATIO = 100
MIN_LIMIT_BYTES = 256 << 20
MAX_TRACE_BYTES_VARIABLE = "GPULENS_MAX_TRACE_BYTES"


def decompressed_limit_bytes(compressed_bytes: int) -> int:
    """The most a gzip file of `compressed_bytes` may decompress to."""
    override = os.environ.get(MAX_TRACE_BYTES_VARIABLE, "")
    if override.isdigit() and int(override) > 0:
        return int(override)
    return max(MIN_LIMIT_BYTES, MAX_RATIO * compressed_bytes)


def _too_big(path: Path, limit: int) -> TraceError:
    return TraceError(str(path), f"decompresses to more than {limit:,} bytes (over {MAX_RATIO} times its size, or "
                                 "--max-trace-bytes): a gzip bomb? raise the limit with --max-trace-bytes")


def iter_chunks(path: Path, skip: int = 0) -> Iterator[bytes]:
    """The decompressed content, in chunks of at most about 1 MiB; from
    content offset `skip` on where given (a gzip file is decompressed up to
    there all the same: gzip has no index to seek by)."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(2)
            if magic != GZIP_MAGIC:
                if skip:
                    handle.seek(skip)
                else:
                    yield magic
                while chunk := handle.read(CHUNK_BYTES):
                    yield chunk
                return
            # The compressed file is small next to its content: read it whole.
            compressed = magic + handle.read()
    except OSError as error:
        raise TraceError(str(path), f"cannot read: {error.strerror or error}") from None
    limit, total = decompressed_limit_bytes(len(compressed)), 0
    try:
        for chunk in _gunzip(compressed):
            total += len(chunk)
            if total > limit:
                raise _too_big(path, limit)
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            yield chunk[skip:] if skip else chunk
            skip = 0
    except zlib.error as error:
        raise TraceError(str(path), f"truncated or corrupt gzip ({error})") from None
    except EOFError:
        raise TraceError(str(path), "truncated or corrupt gzip (the file ends mid-stream)") from None


# Compressed input handed to zlib at a time. With the output capped at
# CHUNK_BYTES a call, zlib hands back the input it did not reach as a new
# bytes object (`unconsumed_tail`): given the whole file at once, each call
# copied the rest of it (the 3.3 MB V100 trace: ~90 MB of copying, 4 % of
# its ingest's CPU); given pieces, at most a piece.
INPUT_PIECE_BYTES = 1 << 16


def _gunzip(compressed: bytes) -> Iterator[bytes]:
    member: bytes | memoryview = memoryview(compressed)
    while True:
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        offset = 0
        while True:
            pending = decompressor.unconsumed_tail
            if not pending and offset < len(member):
                pending = member[offset:offset + INPUT_PIECE_BYTES]
                offset += len(pending)
            chunk = decompressor.decompress(pending, CHUNK_BYTES)
            if chunk:
                yield chunk
            # With output capped, zlib may hold output back with no input
            # left: call again until a call returns nothing.
            if decompressor.eof or not (chunk or decompressor.unconsumed_tail or offset < len(member)):
                break
        if not decompressor.eof:
            raise EOFError
        member = decompressor.unused_data + bytes(member[offset:])  # the next member, if any
        # Zero padding after the last member is allowed, as gzip allows it.
        if not member.strip(b"\0"):
            return


def content_bytes(path: Path | str) -> int:
    """The file's size once decompressed, as its own bytes say: a gzip
    file's count of it (its last 4 bytes, ISIZE: the size mod 4 GiB, so
    never taken below the compressed size); other files their size. 0
    where it cannot be read (`iter_chunks` reports why)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(0)
            if size < 18 or handle.read(2) != GZIP_MAGIC:  # 18: a gzip header and trailer
                return size
            handle.seek(-4, os.SEEK_END)
            return max(size, int.from_bytes(handle.read(4), "little"))
    except OSError:
        return 0


def is_gzip(path: Path | str) -> bool:
    """Whether the file is gzip (by its first bytes); False where it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == GZIP_MAGIC
    except OSError:
        return False


def read_buffer(path: Path) -> bytearray:
    """The whole decompressed content in one buffer."""
    try:
        with open(path, "rb", buffering=0) as handle:
            if handle.read(2) != GZIP_MAGIC:
                handle.seek(0)
                return _read_into(handle, os.fstat(handle.fileno()).st_size)
        # A truncated gzip file's last bytes are not ISIZE: cap the guess at
        # a generous JSON compression ratio; the buffer can grow, and is cut
        # to the content at the end.
        compressed = os.path.getsize(path)
        size_hint = min(content_bytes(path), 64 * compressed, decompressed_limit_bytes(compressed))
    except OSError as error:
        raise TraceError(str(path), f"cannot read: {error.strerror or error}") from None
    buffer = bytearray(size_hint)
    size = 0
    for chunk in iter_chunks(path):
        end = size + len(chunk)
        if end > len(buffer):
            buffer.extend(bytes(end - len(buffer)))
        buffer[size:end] = chunk
        size = end
    del buffer[size:]
    return buffer


def _read_into(handle: BinaryIO, size: int) -> bytearray:
    """A file's bytes, read straight into a buffer of its size: no 1 MiB
    chunk allocated, faulted in and copied again on the way (64 files of
    1.4 MB: 9 ms rather than 0.10 s). It reads on where the file grew
    since its size was taken."""
    buffer = bytearray(size)
    filled = 0
    with memoryview(buffer) as view:
        while filled < size and (got := handle.readinto(view[filled:])):
            filled += got
    if filled < size:  # it shrank
        del buffer[filled:]
    else:
        while chunk := handle.read(CHUNK_BYTES):
            buffer += chunk
    return buffer
