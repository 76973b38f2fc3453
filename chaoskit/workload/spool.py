"""A loader's spool: the batches a load agent produced, on its own host's disk, in numbered and
checksummed frames, so a batch never lives only in a process or a connection (issue: load from
several machines). The agent appends; the controller reads `after` the last sequence number it
applied, through whatever reaches the host (the agent's server, or the file's tail over SSH).

One frame:

    magic  b"CKF1"       4 bytes
    seq    uint64 LE     the frame's number: 1, 2, 3 ... in file order
    length uint32 LE     of the payload
    crc32  uint32 LE     of seq, length and the payload
    payload              `length` bytes (the codec's, `chaoskit.workload.wire`)

The writer fsyncs about once a second (`sync_every_s`), and at `close()`: a host that crashes
loses at most that second, and the frames before it read back whole. A reader takes every whole
frame and stops at the first that is not (yet): a frame cut short at the end of the file is one
still being written (or the writer died mid-write), never an error; a frame whose checksum or
magic is wrong with more bytes after it is damage and raises `SpoolDamaged` (offset and why), never
skipped silently (a tail of zero bytes, which a host that crashed can leave, is unwritten
space). A spool is one writer's: it refuses to open a file that already has frames.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"CKF1"
HEAD = struct.Struct("<4sQII")  # magic, seq, length, crc32
MAX_PAYLOAD = 64 << 20  # a frame longer than this is damage, not a batch


class SpoolDamaged(Exception):
    """A frame that is not whole with more bytes after it: the file is damaged at `offset`."""

    def __init__(self, path: Path, offset: int, why: str) -> None:
        super().__init__(f"{path}: damaged frame at byte {offset}: {why}")
        self.path, self.offset, self.why = path, offset, why


def _crc(seq: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(struct.pack("<QI", seq, len(payload))))


def frame(seq: int, payload: bytes) -> bytes:
    """One frame's bytes."""
    if not 0 < seq < 1 << 64:
        raise ValueError(f"frame number {seq} out of range")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes is over {MAX_PAYLOAD}")
    return HEAD.pack(MAGIC, seq, len(payload), _crc(seq, payload)) + payload


class SpoolWriter:
    """Appends frames to a new spool file (created 0600, its directory 0700)."""

    def __init__(self, path: Path, sync_every_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        if os.fstat(fd).st_size:
            os.close(fd)
            raise FileExistsError(f"{path} already holds frames: a spool is one writer's from its first frame")
        self._fd: int | None = fd
        self.seq = 0  # the last frame written
        self.synced_seq = 0  # the last frame known on disk
        self.sync_every_s = sync_every_s
        self._clock = clock
        self._synced_at = clock()

    def append(self, payload: bytes) -> int:
        """Write one frame; its number. Synced to disk when the last sync is `sync_every_s` old."""
        if self._fd is None:
            raise ValueError(f"{self.path}: spool closed")
        seq = self.seq + 1
        data = frame(seq, payload)
        written = 0
        while written < len(data):
            written += os.write(self._fd, data[written:])
        self.seq = seq
        if self._clock() - self._synced_at >= self.sync_every_s:
            self.sync()
        return seq

    def sync(self) -> None:
        if self._fd is not None and self.synced_seq != self.seq:
            os.fsync(self._fd)
            self.synced_seq = self.seq
        self._synced_at = self._clock()

    def close(self) -> None:
        if self._fd is not None:
            self.sync()
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> SpoolWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Frame:
    seq: int
    payload: bytes
    offset: int  # where it starts in the file


class FrameCursor:
    """Where a reader of one spool stands (the first byte not yet read as a whole frame, the last
    whole frame's number) and the rule that reads frames from the bytes after it: every whole
    frame, stopping at the first that is not (yet); damage raises `SpoolDamaged`. The bytes may
    come from the file itself (`SpoolReader`) or from its tail read on another host."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.offset = 0
        self.seq = 0

    def rewind_for(self, after: int) -> None:
        """Asked for frames from further back than it stands: start over."""
        if after < self.seq:
            self.offset, self.seq = 0, 0

    def take(self, data: bytes, at_end: bool, after: int, max_bytes: int = 16 << 20) -> list[Frame]:
        """The whole frames in `data` (the spool's bytes from `self.offset`; `at_end`: they reach
        the end of the file as it was read) numbered above `after`, up to about `max_bytes` of
        payload; the cursor moves past every whole frame read."""
        out: list[Frame] = []
        taken, pos, size = 0, 0, len(data)
        while pos + HEAD.size <= size and taken < max_bytes:
            magic, seq, length, crc = HEAD.unpack_from(data, pos)
            end = pos + HEAD.size + length
            if magic != MAGIC:
                if data.count(0, pos) == size - pos:  # a crash's unwritten tail (or its start): nothing yet
                    break
                raise SpoolDamaged(self.path, self.offset, f"no frame mark ({magic!r})")
            if length > MAX_PAYLOAD:
                raise SpoolDamaged(self.path, self.offset, f"length {length} over {MAX_PAYLOAD}")
            if end > size:  # still being written, or beyond what was read this time
                break
            payload = bytes(data[pos + HEAD.size:end])
            if _crc(seq, payload) != crc:
                if end == size and at_end:  # the last frame, written but not whole on disk yet
                    break
                raise SpoolDamaged(self.path, self.offset, f"checksum of frame {seq} is wrong")
            if seq != self.seq + 1:
                raise SpoolDamaged(self.path, self.offset, f"frame {seq} follows frame {self.seq}")
            start = self.offset
            self.offset, self.seq, pos = self.offset + (end - pos), seq, end
            if seq > after:
                out.append(Frame(seq, payload, start))
                taken += length
        return out


class SpoolReader:
    """Reads a spool's whole frames in order, remembering where it stopped, so each call reads
    only what was appended since. `read(after=N)` gives the frames numbered above N."""

    READ_BYTES = 16 << 20

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cursor = FrameCursor(path)

    @property
    def offset(self) -> int:
        return self.cursor.offset

    @property
    def seq(self) -> int:
        return self.cursor.seq

    def read(self, after: int = 0, max_bytes: int = 16 << 20) -> list[Frame]:
        """The whole frames numbered above `after` (those at or below it are skipped), up to
        about `max_bytes` of payload; [] when nothing whole was appended. Raises `SpoolDamaged`."""
        self.cursor.rewind_for(after)
        out: list[Frame] = []
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            return out
        taken = 0
        with fh:
            size = os.fstat(fh.fileno()).st_size
            while taken < max_bytes and self.cursor.offset + HEAD.size <= size:
                at = self.cursor.offset
                fh.seek(at)
                head = fh.read(HEAD.size)
                want = min(size - at, self.READ_BYTES)
                if len(head) == HEAD.size and head[:4] == MAGIC:
                    want = min(size - at, max(want, HEAD.size + HEAD.unpack(head)[2]))
                fh.seek(at)
                data = fh.read(want)
                got = self.cursor.take(data, at + len(data) >= size, after, max_bytes - taken)
                out += got
                taken += sum(len(f.payload) for f in got)
                if self.cursor.offset == at:  # nothing whole here (yet)
                    if data[:4] != MAGIC and at + len(data) < size and not self._zeros_from(fh, at, size):
                        raise SpoolDamaged(self.path, at, f"no frame mark ({data[:4]!r})")
                    break
        return out

    @staticmethod
    def _zeros_from(fh: Any, offset: int, size: int) -> bool:
        """Whether the file holds only zero bytes from `offset` (a host that crashed can leave
        its size past the data it wrote)."""
        fh.seek(offset)
        while chunk := fh.read(min(1 << 20, size - fh.tell())):
            if chunk.count(0) != len(chunk):
                return False
        return True
