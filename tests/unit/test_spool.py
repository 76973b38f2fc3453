"""A loader's spool (numbered, checksummed frames on the loader's disk) and the batch codec that
fills its frames: what is read back is exactly what was written, a frame still being written is
waited for, damage is said with its offset, and a payload that is not a batch is refused by field."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from chaoskit.recorder import FAIL, INFO, OK, SEQUENCE, VERSION, Recorder
from chaoskit.workload import spool, wire


def _written(path: Path, payloads: list[bytes]) -> None:
    with spool.SpoolWriter(path) as w:
        for p in payloads:
            w.append(p)


def test_frames_read_back_in_order_and_only_the_new_ones(tmp_path: Path) -> None:
    path = tmp_path / "spool" / "a.frames"
    w = spool.SpoolWriter(path)
    assert [w.append(p) for p in (b"one", b"", b"three")] == [1, 2, 3]
    r = spool.SpoolReader(path)
    assert [(f.seq, f.payload) for f in r.read()] == [(1, b"one"), (2, b""), (3, b"three")]
    assert r.read(after=3) == []  # nothing new
    w.append(b"four")
    assert [(f.seq, f.payload) for f in r.read(after=3)] == [(4, b"four")]
    # asked from further back (a controller that re-attached): from the start again
    assert [f.seq for f in r.read(after=1)] == [2, 3, 4]
    assert [f.seq for f in spool.SpoolReader(path).read(after=2)] == [3, 4]
    w.close()
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"


def test_a_frame_cut_short_is_one_still_being_written(tmp_path: Path) -> None:
    path = tmp_path / "a.frames"
    whole = spool.frame(1, b"first") + spool.frame(2, b"second batch")
    for cut in range(len(spool.frame(1, b"first")) + 1, len(whole)):  # every cut inside frame 2
        path.write_bytes(whole[:cut])
        assert [f.seq for f in spool.SpoolReader(path).read()] == [1], cut
    # a host that crashed can leave its file longer than what it wrote: zeros, not damage
    path.write_bytes(whole + bytes(100))
    r = spool.SpoolReader(path)
    assert [f.seq for f in r.read()] == [1, 2]
    # the rest written later (the same reader goes on where it stopped)
    path.write_bytes(whole[:30])
    r = spool.SpoolReader(path)
    assert [f.seq for f in r.read()] == [1]
    path.write_bytes(whole)
    assert [f.payload for f in r.read(after=1)] == [b"second batch"]


def test_damage_is_said_with_its_offset_never_skipped(tmp_path: Path) -> None:
    path = tmp_path / "a.frames"
    one, two, three = spool.frame(1, b"a" * 10), spool.frame(2, b"b" * 10), spool.frame(3, b"c" * 10)
    data = bytearray(one + two + three)
    data[len(one) + spool.HEAD.size + 3] ^= 0xFF  # a payload byte of frame 2
    path.write_bytes(bytes(data))
    with pytest.raises(spool.SpoolDamaged, match=f"at byte {len(one)}: checksum of frame 2 is wrong"):
        spool.SpoolReader(path).read()
    # the same damage in the last frame, with nothing after it, is a frame not yet whole on disk
    path.write_bytes(one + bytes(data[len(one):len(one) + len(two)]))
    assert [f.seq for f in spool.SpoolReader(path).read()] == [1]
    path.write_bytes(one + b"JUNK" + two[4:] + three)
    with pytest.raises(spool.SpoolDamaged, match=r"no frame mark \(b'JUNK'\)"):
        spool.SpoolReader(path).read()
    path.write_bytes(one + three)  # a frame missing
    with pytest.raises(spool.SpoolDamaged, match="frame 3 follows frame 1"):
        spool.SpoolReader(path).read()


def test_a_spool_is_one_writers_and_synced_about_once_a_second(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.frames"
    _written(path, [b"x"])
    with pytest.raises(FileExistsError, match="already holds frames"):
        spool.SpoolWriter(path)
    synced: list[int] = []
    monkeypatch.setattr(spool.os, "fsync", lambda fd: synced.append(fd))
    now = [100.0]
    w = spool.SpoolWriter(tmp_path / "b.frames", sync_every_s=1.0, clock=lambda: now[0])
    for t in (100.2, 100.5, 100.9):  # within the second: written, not synced
        now[0] = t
        w.append(b"p")
    assert synced == [] and w.synced_seq == 0
    now[0] = 101.0
    w.append(b"p")  # the second is up: frames 1-4 on disk
    assert len(synced) == 1 and w.synced_seq == 4
    now[0] = 101.5
    w.append(b"p")
    w.close()  # the close syncs what is left
    assert len(synced) == 2 and w.synced_seq == 5
    with pytest.raises(ValueError, match="spool closed"):
        w.append(b"p")


def _drained(tmp_path: Path) -> tuple[Recorder, list]:
    """A worker's recorder after ledger writes, updates, failures and a gap, drained twice."""
    rec = Recorder(base=1000.0, keep_ops=True, stall_s=1.0)
    t = 1000.05
    for seq in range(1, 41):
        outcome = FAIL if seq in (7, 8, 9) else INFO if seq == 20 else OK
        rec.record(3, "write", t, t + 0.004, outcome, "connection_lost" if outcome != OK else None,
                   "server closed the connection" if outcome != OK else "", key=seq, node="pg1", keyed=SEQUENCE)
        t += 0.01
    for row in (5, 5, 9):
        rec.record(4, "write", t, t + 0.002, OK, key=row, node="pg2", keyed=VERSION)
        t += 0.01
    rec.record(4, "read", t, t + 0.001, FAIL, "read_only", "cannot execute in a read-only transaction")
    # acknowledged only after the stall bound (1 s): a gap of class stall, without errors
    rec.record(5, "write", t - 0.5, t + 0.9, OK, key=1, node="pg1", keyed=SEQUENCE)
    # list-append transactions: an acknowledged one that read and appended, an aborted one
    rec.record(6, "write", t, t + 0.003, OK, txn=(("r", 7, (4102, 8198)), ("append", 7, 12294)))
    rec.record(6, "write", t + 0.01, t + 0.02, FAIL, "serialization", "could not serialize",
               txn=(("append", 8, 16390), ("r", 9, None)))
    first = rec.drain(t + 1.0)
    rec.record(3, "write", t + 1.1, t + 1.2, OK, key=41, node="pg2", keyed=SEQUENCE)
    rec.record(6, "read", t + 1.1, t + 1.15, OK, txn=(("r", 7, ()),))
    return rec, [first, rec.drain(t + 2.0, final=True)]


def test_a_drained_batch_comes_back_exactly_and_merges_to_the_same_figures(tmp_path: Path) -> None:
    _, batches = _drained(tmp_path)
    back = [wire.decode(wire.encode(b)) for b in batches]
    assert back == batches
    assert batches[0].ledger and batches[0].gaps and batches[0].errors and batches[0].rows and batches[0].ops
    assert [(g.worker, g.first_err_class, g.errors) for g in batches[0].gaps if g.errors == 0] == [(5, "stall", 0)]
    direct, via = Recorder(base=1000.0, keep_ops=True), Recorder(base=1000.0, keep_ops=True)
    for b, c in zip(batches, back, strict=True):
        direct.merge(b)
        via.merge(wire.decode(wire.encode(c)))
    direct.finish()
    via.finish()
    assert via.totals() == direct.totals()
    assert via.ledger_acknowledged() == direct.ledger_acknowledged() == {3: [(1, 6), (10, 19), (21, 41)], 5: [(1, 1)]}
    assert via.row_updates == direct.row_updates == {5: [2, 0], 9: [1, 0]}
    assert [tuple(o) for o in via.history.kept_ops()] == [tuple(o) for o in direct.history.kept_ops()]
    assert list(via.txns) == list(direct.txns) == [
        # t: 1000.05 + 40 ledger writes and 3 updates 0.01 apart = 1000.48
        (6, pytest.approx(1000.48), pytest.approx(1000.483), OK, (("r", 7, (4102, 8198)), ("append", 7, 12294))),
        (6, pytest.approx(1000.49), pytest.approx(1000.50), FAIL, (("append", 8, 16390), ("r", 9, None))),
        (6, pytest.approx(1001.58), pytest.approx(1001.63), OK, (("r", 7, ()),))]


def _payload(**change: object) -> bytes:
    doc = {"v": 1, "intervals": [], "errors": [], "errors_dropped": 0, "gaps": [], "ledger": [], "ops": [],
           "rows": {}, "watermark": 5}
    doc.update(change)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("payload", "field"), [
    (pickle.dumps({"v": 1}), "(the payload)"),
    (b"", "(the payload)"),
    (_payload(v=2), "v"),
    (_payload(watermark="5"), "watermark"),
    (_payload(errors_dropped=-1), "errors_dropped"),
    (_payload(extra=1), "extra"),
    (_payload(ledger=[[1, 1, "AAAA"], [2, 1, "AAAAAA=="]]), "ledger"),  # 3 bytes: no whole entry
    (_payload(ledger=[[1, 0, "AAAAAA=="]]), "ledger.0.1"),  # sequence numbers start at 1
    (_payload(errors=[[1.0, 1, "write", "fail", "rm -rf", "x"]]), "errors.0.4"),
    (_payload(errors=[[1.0, 1, "write", "maybe", "timeout", "x"]]), "errors.0.3"),
    (_payload(intervals=[[1, [0, 1], "AA=="]]), "intervals"),
    (_payload(rows={"1; DROP": [1, 0]}), "rows"),
    # a transaction's append carries its value, a read the list it read
    (_payload(txns=[[1, 1.0, 2.0, "ok", [["append", 1, [5]]]]]), "txns"),
    (_payload(txns=[[1, 1.0, 2.0, "ok", [["r", 1, 5]]]]), "txns"),
    (_payload(txns=[[1, 1.0, 2.0, "ok", [["drop", 1, 5]]]]), "txns.0.4.0.0"),
    (_payload(gaps=[{"worker": 1, "last_ok_before": None, "first_err": 1.0, "first_err_class": "bogus",
                     "first_ok_after": None, "errors": 1}]), "gaps.0.first_err_class"),
    # a gap without errors is a stall, and a stall has none
    (_payload(gaps=[{"worker": 1, "last_ok_before": None, "first_err": 1.0, "first_err_class": "timeout",
                     "first_ok_after": 2.0, "errors": 0}]), "gaps.0"),
    (_payload(gaps=[{"worker": 1, "last_ok_before": None, "first_err": 1.0, "first_err_class": "stall",
                     "first_ok_after": 2.0, "errors": 2}]), "gaps.0"),
    (b'{"v":1,"intervals":[],"errors":[],"errors_dropped":0,"gaps":[],"ledger":[],"ops":[],"rows":{},'
     b'"watermark":NaN}', "watermark"),
])
def test_a_payload_that_is_not_a_batch_is_refused_by_field(payload: bytes, field: str) -> None:
    with pytest.raises(wire.WireError) as err:
        wire.decode(payload)
    assert str(err.value).startswith(f"not a batch: {field}"), str(err.value)


def test_spooled_batches_read_back_as_the_batches(tmp_path: Path) -> None:
    _, batches = _drained(tmp_path)
    path = tmp_path / "agent" / "batches.frames"
    _written(path, [wire.encode(b) for b in batches])
    assert [wire.decode(f.payload) for f in spool.SpoolReader(path).read()] == batches
    assert os.path.getsize(path) == sum(spool.HEAD.size + len(wire.encode(b)) for b in batches)


@pytest.mark.parametrize("chunk", [1, 7, 20, 64, 10_000])
def test_a_tail_read_in_pieces_gives_the_same_frames_as_the_file(tmp_path: Path, chunk: int) -> None:
    """A spool on another host is read as its tail from the cursor's offset, at most `chunk` bytes
    a time (how a loader's tail comes over SSH): the same frames in the same order as the file
    reader gives, a frame cut by the chunk read whole on a later call, never called damaged."""
    path = tmp_path / "a.frames"
    payloads = [b"x" * n for n in (0, 5, 33, 1, 70, 2)]
    _written(path, payloads)
    raw = path.read_bytes()
    cursor = spool.FrameCursor(path)
    got: list[tuple[int, bytes]] = []
    for _ in range(10_000):
        if cursor.offset >= len(raw):
            break
        piece = raw[cursor.offset:cursor.offset + chunk]
        before = cursor.offset
        got += [(f.seq, f.payload) for f in cursor.take(piece, cursor.offset + len(piece) >= len(raw), after=0)]
        if cursor.offset == before:  # a frame longer than the piece: a longer read
            piece = raw[cursor.offset:]
            got += [(f.seq, f.payload) for f in cursor.take(piece, True, after=0)]
    assert got == [(i + 1, p) for i, p in enumerate(payloads)]
    assert got == [(f.seq, f.payload) for f in spool.SpoolReader(path).read()]


def test_a_damaged_frame_in_a_tail_is_said_with_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "a.frames"
    _written(path, [b"one", b"two", b"three"])
    raw = bytearray(path.read_bytes())
    second = spool.HEAD.size + 3
    raw[second + spool.HEAD.size] ^= 0xFF  # the second frame's payload
    cursor = spool.FrameCursor(path)
    with pytest.raises(spool.SpoolDamaged) as err:
        cursor.take(bytes(raw), True, after=0)
    assert err.value.offset == second and "checksum of frame 2" in err.value.why
    assert cursor.seq == 1  # the frame before it was read
