"""A restore drill's own figures, from the record of its `restore` action and of the disaster
before it (pure): how long the restore took by phase, its RTO, its target and how far back the
restored data reaches, and the archive as the primary saw it when the disaster struck.

- `restore_s`: the restore action sent (the restore target's server stopped, the files fetched and
  written, the server started, its recovery replayed) to the restored server taking a write;
- `rto_s`: the disaster (the first `drop_table`, as sent) to that same instant: how long the
  application had no database with its data, had it been pointed at the restored one at once;
- `phases`: from the tool's and the server's own log lines, each stamped on the control clock
  (`chaoskit.backup.base.PHASES`); the gaps between phases are chaoskit's own steps;
- `archive_at_disaster`: the last archived WAL segment at the disaster and its age, as the
  primary's `pg_stat_archiver` said just before it.
"""

from __future__ import annotations

from typing import Any

DISASTERS = ("drop_table",)


def restore_figures(actions: list[dict[str, Any]]) -> dict[str, Any] | None:
    restore = next((a for a in actions if a.get("kind") == "restore"), None)
    if restore is None:
        return None
    disaster = next((a for a in actions if a.get("kind") in DISASTERS), None)
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
        "rto_s": round(answering - disaster["t_sent"], 3) if answering is not None and disaster else None,
        "t_disaster": disaster.get("t_sent") if disaster else None,
        "last_commit_t": restore.get("last_commit_t"),
        "flush_archive": restore.get("flush_archive"),
        "backups_taken": [{"label": b.get("label"), "type": b.get("type"), "ok": b.get("ok"),
                           "seconds": round(b["t_answered"] - b["t_sent"], 3) if b.get("t_answered") else None}
                          for b in backups],
    }
    if disaster is not None:
        archive = disaster.get("archive") or {}
        out["archive_at_disaster"] = {k: archive.get(k) for k in ("last_archived", "current_segment",
                                                                    "archive_age_s", "last_failed", "error")
                                      if archive.get(k) is not None}
    return out
