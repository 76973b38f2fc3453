"""A restore drill's own figures, from the record of its `restore` action and of the disaster
before it (pure): how long the restore took by phase, its RTO, its target and how far back the
restored data reaches, and the archive as the primary saw it when the disaster struck.

- `restore_s`: the restore action sent (the restore target's server stopped, the files fetched and
  written, the server started, its recovery replayed) to the restored server taking a write;
- `rto_s`: the disaster (the first `drop_table`, as sent; without one, the last fault on a member
  of the cluster before the restore, as it took effect) to that same instant: how long the
  application had no database with its data, had it been pointed at the restored one at once;
- `phases`: from the tool's and the server's own log lines, each stamped on the control clock
  (`chaoskit.backup.base.PHASES`); the gaps between phases are chaoskit's own steps;
- `archive_at_disaster`: the last archived WAL segment at the disaster and its age, as the
  primary's `pg_stat_archiver` said just before it.
"""

from __future__ import annotations

from typing import Any

DISASTERS = ("drop_table",)


def disaster_action(actions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run's first disaster action (`drop_table`), if it has one."""
    return next((a for a in actions if a.get("kind") in DISASTERS), None)


def disaster_of(restore: dict[str, Any], actions: list[dict[str, Any]], faults: list[dict[str, Any]],
                members: set[str]) -> dict[str, Any] | None:
    """What the restore recovers from: the first disaster action (`drop_table`), else the last fault
    on a member of the cluster that took effect before the restore was sent (a crash of the
    primary); its instant as `t_sent` (an action's) or `t_effect` (a fault's)."""
    drop = disaster_action(actions)
    if drop is not None:
        return {"kind": drop["kind"], "t": drop.get("t_sent")}
    before = [f for f in faults if f.get("host") in members and f.get("t_effect") is not None
              and f["t_effect"] < (restore.get("t_sent") or float("inf"))]
    last = max(before, key=lambda f: f["t_effect"], default=None)
    return None if last is None else {"kind": last.get("kind"), "host": last.get("host"), "t": last["t_effect"]}


def restore_figures(actions: list[dict[str, Any]], faults: list[dict[str, Any]] | None = None,
                    members: set[str] | None = None) -> dict[str, Any] | None:
    restore = next((a for a in actions if a.get("kind") == "restore"), None)
    if restore is None:
        return None
    disaster = disaster_of(restore, actions, faults or [], members or set())
    drop = disaster_action(actions)
    backups = [a for a in actions if a.get("kind") == "backup"]
    marks = {m["name"]: m["t"] for m in restore.get("marks") or []}
    answering = marks.get("answering") if restore.get("ok") else None
    target = restore.get("target") or {}
    out: dict[str, Any] = {
        "ok": bool(restore.get("ok")), "answer": None if restore.get("ok") else restore.get("answer"),
        "host": restore.get("member"), "t_sent": restore.get("t_sent"), "t_answering": answering,
        "target_t": target.get("t"), "target_utc": target.get("utc"), "target_said": target.get("said"),
        "backup": (restore.get("tool") or {}).get("backup"), "size": (restore.get("tool") or {}).get("size"),
        "phases": restore.get("phases") or [],
        "restore_s": round(answering - restore["t_sent"], 3) if answering is not None else None,
        "rto_s": round(answering - disaster["t"], 3) if answering is not None and disaster and disaster["t"] else None,
        "t_disaster": disaster["t"] if disaster else None, "disaster": disaster,
        "last_commit_t": restore.get("last_commit_t"),
        "flush_archive": restore.get("flush_archive"),
        "backups_taken": [{"label": b.get("label"), "type": b.get("type"), "ok": b.get("ok"),
                           "seconds": round(b["t_answered"] - b["t_sent"], 3) if b.get("t_answered") else None}
                          for b in backups],
    }
    if drop is not None:
        archive = drop.get("archive") or {}
        out["archive_at_disaster"] = {k: archive.get(k) for k in ("last_archived", "current_segment",
                                                                    "archive_age_s", "last_failed", "error")
                                      if archive.get(k) is not None}
    return out


def archive_figures(samples: list[dict[str, Any]], t0: float) -> dict[str, Any] | None:
    """The archive over the run, from the primary's readings once a second (`chaoskit.backup.watch`):
    how far behind it fell (`max_age_s`: the primary's clock minus its last archived segment's time,
    and when), the stretches where archiving failed (`failing`: from the first reading that saw the
    last attempt fail to the first that saw a segment archived again, seconds into the run), the
    stretches where the archive was older than the server's `archive_timeout` (under load a healthy
    archive switches and pushes a segment at least that often: older, it has fallen behind, whether
    or not an attempt failed yet; an archive command that retries a repository it cannot reach
    fails only when it gives up) and the readings that could not be taken (the primary down). None
    without readings."""
    if not samples:
        return None
    read = [s for s in samples if "error" not in s]
    aged = [s for s in read if s.get("archive_age_s") is not None]
    worst = max(aged, key=lambda s: s["archive_age_s"], default=None)
    timeout = next((s["archive_timeout_s"] for s in reversed(read) if s.get("archive_timeout_s")), None)
    return {"readings": len(samples), "unread": len(samples) - len(read),
            "max_age_s": worst["archive_age_s"] if worst else None,
            "max_age_at_s": round(worst["t"] - t0, 3) if worst else None,
            "failing": stretches(read, lambda s: bool(s.get("failing")), t0),
            "archive_timeout_s": timeout,
            "over_archive_timeout": stretches(aged, lambda s: s["archive_age_s"] > timeout, t0) if timeout else [],
            "last_archived": read[-1].get("last_archived") if read else None}


def stretches(samples: list[dict[str, Any]], holds: Any, t0: float) -> list[list[float | None]]:
    """[from, to] (seconds into the run) of each run of readings where `holds`: from the first
    reading where it held to the first where it no longer did (None: to the last reading)."""
    out: list[list[float | None]] = []
    for s in samples:
        if holds(s) and (not out or out[-1][1] is not None):
            out.append([round(s["t"] - t0, 3), None])
        elif not holds(s) and out and out[-1][1] is None:
            out[-1][1] = round(s["t"] - t0, 3)
    return out
