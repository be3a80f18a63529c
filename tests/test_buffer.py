"""Reading trace files whole or in chunks, gzip or not (collector.ingest.buffer).

Every behaviour is checked with both decompressors: zlib-ng, which gpulens
installs, and the standard library's zlib, its fallback where zlib-ng has
no wheel.
"""

from __future__ import annotations

import gzip
import random
import zlib as stdlib_zlib
from pathlib import Path

import pytest

from gpulens.collector.errors import TraceError
from gpulens.collector.ingest import buffer
from gpulens.collector.ingest.buffer import CHUNK_BYTES, content_bytes, iter_chunks, read_buffer


def _decompressors() -> list:
    modules = [pytest.param(stdlib_zlib, id="zlib")]
    try:
        from zlib_ng import zlib_ng

        modules.insert(0, pytest.param(zlib_ng, id="zlib-ng"))
    except ImportError:
        modules.insert(0, pytest.param(None, id="zlib-ng", marks=pytest.mark.skip(reason="zlib-ng not installed")))
    return modules


@pytest.fixture(params=_decompressors(), autouse=True)
def decompressor(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buffer, "zlib", request.param)


def trace_text(kernels: int) -> bytes:
    """A Kineto-like JSON text; random names so gzip cannot shrink it to nothing."""
    rng = random.Random(kernels)
    events = ",".join(f'{{"ph": "X", "cat": "kernel", "name": "k{rng.getrandbits(48):x}", "ts": {i}, "dur": 1}}'
                      for i in range(kernels))
    return b'{"traceEvents": [' + events.encode() + b"]}"


def test_plain_file_reads_back_unchanged(tmp_path: Path) -> None:
    text = trace_text(100)
    path = tmp_path / "trace.json"
    path.write_bytes(text)
    assert (b"".join(iter_chunks(path)), bytes(read_buffer(path)), content_bytes(path)) == (text, text, len(text))


@pytest.mark.parametrize("change", [-1.0, -0.5, 0.5], ids=["grew from empty", "grew", "shrank"])
def test_plain_file_read_whole_ends_where_the_file_does_whatever_size_was_taken(tmp_path: Path, change: float) -> None:
    # Its size is taken before it is read: a trace still being written
    # may have grown or been cut short since.
    text = trace_text(2_000)
    path = tmp_path / "trace.json"
    path.write_bytes(text)
    with open(path, "rb", buffering=0) as handle:
        assert bytes(buffer._read_into(handle, round(len(text) * (1 + change)))) == text


def test_gzip_content_comes_in_chunks_of_at_most_a_mebibyte(tmp_path: Path) -> None:
    text = trace_text(60_000)  # ~4.5 MB decompressed
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(text))
    chunks = list(iter_chunks(path))
    assert (b"".join(chunks), len(chunks) > 1, max(map(len, chunks)) <= CHUNK_BYTES) == (text, True, True)


def test_gzip_reads_whole_into_one_buffer(tmp_path: Path) -> None:
    text = trace_text(60_000)
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(text))
    assert bytes(read_buffer(path)) == text


def test_content_bytes_of_gzip_is_its_decompressed_size(tmp_path: Path) -> None:
    text = trace_text(1_000)
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(text))
    assert content_bytes(path) == len(text)


def test_multi_member_gzip_reads_every_member(tmp_path: Path) -> None:
    # `cat a.gz b.gz > c.gz` is a valid gzip file of both contents.
    first, second = trace_text(500), trace_text(700)
    path = tmp_path / "joined.json.gz"
    path.write_bytes(gzip.compress(first) + gzip.compress(second))
    assert (b"".join(iter_chunks(path)), bytes(read_buffer(path))) == (first + second, first + second)


def test_zero_padding_after_the_last_member_is_ignored(tmp_path: Path) -> None:
    text = trace_text(500)
    path = tmp_path / "padded.json.gz"
    path.write_bytes(gzip.compress(text) + b"\0" * 512)
    assert b"".join(iter_chunks(path)) == text


def test_truncated_gzip_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "truncated.json.gz"
    path.write_bytes(gzip.compress(trace_text(5_000))[:4_000])
    with pytest.raises(TraceError) as error:
        read_buffer(path)
    assert str(error.value) == f"{path}: truncated or corrupt gzip (the file ends mid-stream)"


def test_corrupt_gzip_names_the_file(tmp_path: Path) -> None:
    compressed = bytearray(gzip.compress(trace_text(5_000)))
    compressed[3] = 0xE0  # reserved header flag bits set: not a valid gzip header
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(bytes(compressed))
    with pytest.raises(TraceError, match=rf"^{path}: truncated or corrupt gzip \(") as error:
        list(iter_chunks(path))
    assert "\n" not in str(error.value)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gone.json"
    with pytest.raises(TraceError) as error:
        list(iter_chunks(path))
    assert str(error.value) == f"{path}: cannot read: No such file or directory"


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_chunks_from_an_offset_are_the_content_after_it(tmp_path: Path, name: str) -> None:
    text = trace_text(60_000)  # ~4.5 MB: the offsets fall in the first, a middle and the last chunk
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    offsets = [1, CHUNK_BYTES, CHUNK_BYTES + 7, len(text) - 3, len(text), len(text) + 100]
    assert [b"".join(iter_chunks(path, skip)) for skip in offsets] == [text[skip:] for skip in offsets]
