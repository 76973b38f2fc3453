"""The checks a workload makes of its own data after a run, as objects the workload declares.

A check says once: its `name` (what a playbook's `checks:` calls it), what it reads through the
writer after recovery (`read`, kept in the run's truth under `reads`), how it judges the recorded
history against that (`judge`, and `judge_group` for one client group's workers where the figure
exists per group), and its `severity` (`fail`: a failed check fails the verdict; `advisory`: it is
said and never fails it). The analysis calls
every check the same way (`chaoskit.analysis.drill`); a workload lists its checks in
`Workload.data_checks`, so a workload with a new check is its module and the check's class (here
when another workload may share it). The cluster's own checks (split-brain from the role probe,
replica convergence from every member's digest) are the analysis's, whatever the workload.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from chaoskit.keyranges import KeyRanges
from chaoskit.recorder import Recorder
from chaoskit.workload.durability import lost_update_check, pitr_check, rpo_check


@dataclass(frozen=True)
class Judging:
    """What every check is judged with besides what it read."""

    rec: Recorder
    t_fault: float | None  # the first fault that caused an outage (else the first fault)
    max_lost: int | None  # the playbook's bound on acknowledged writes lost (slo.rpo_max_writes)
    groups: int  # client groups in the run: with several, a loss bound is judged per group
    error: str | None  # why nothing could be read through the writer (None: it was read)
    t_recovered: float | None = None  # that fault's recovery (clients back and throughput held), if it came
    # a restore's: what was read is the restored server, recovered to `restore_target` (None: the
    # latest); a write is placed against it within `restore_margin_s` (the clocks' uncertainty)
    restored: bool = False
    restore_target: float | None = None
    restore_margin_s: float = 0.0


class Check(ABC):
    name: ClassVar[str]
    reads: ClassVar[str]
    severity: ClassVar[str] = "fail"  # or "advisory"
    per_group: ClassVar[bool] = False  # it has a figure per client group (`judge_group`)

    @classmethod
    @abstractmethod
    def read(cls, workload: Any, conn: Any, before: Any) -> dict[str, Any]:
        """Through the writer after recovery (`before`: what the workload read before the load)."""

    @classmethod
    @abstractmethod
    def judge(cls, truth: dict[str, Any] | None, j: Judging) -> dict[str, Any]:
        """The check's result (`valid`: true, false or "unknown", and its figures)."""

    @classmethod
    def judge_group(cls, truth: dict[str, Any] | None, j: Judging, workers: set[int], max_lost: int | None,
                    nodes: dict[tuple[int, int], str]) -> dict[str, Any] | None:
        """The figure for one client group's workers (None: this check has none per group)."""
        return None

    @staticmethod
    def unread(j: Judging) -> dict[str, Any]:
        return {"valid": "unknown", "error": j.error}


class LostWrites(Check):
    """RPO of a ledger: every acknowledged row (worker, sequence number) must be there after
    recovery; rows there that no write was acknowledged or left indeterminate for are phantoms."""

    name = "rpo"
    reads = "ledger_present"
    per_group = True

    @classmethod
    def read(cls, workload: Any, conn: Any, before: Any) -> dict[str, Any]:
        rows = workload.present(conn)
        # no ledger table on the server (restored to before it was made, or dropped): none of the rows
        return {"rows": KeyRanges(), "table_absent": True} if rows is None else {"rows": rows}

    @classmethod
    def judge(cls, truth: dict[str, Any] | None, j: Judging) -> dict[str, Any]:
        if not truth:
            return cls.unread(j)
        if "rows" not in truth:
            return truth  # the reading failed: it says why
        # with several client groups the loss bound is judged per group (each kind of client is an
        # application of its own; see judge_group and the SLO); the totals still fail on phantoms
        if j.restored:  # the rows a restore brought back, judged against its target
            out = pitr_check(j.rec, truth["rows"], j.restore_target, j.restore_margin_s, j.t_fault,
                             None if j.groups > 1 else j.max_lost)
        else:
            out = rpo_check(j.rec, truth["rows"], j.t_fault, None if j.groups > 1 else j.max_lost)
        if truth.get("table_absent"):
            out["table_absent"] = True
            out["text"] = f"the ledger table is not on the server, so none of the run's writes is: {out['text']}"
        return out

    @classmethod
    def judge_group(cls, truth: dict[str, Any] | None, j: Judging, workers: set[int], max_lost: int | None,
                    nodes: dict[tuple[int, int], str]) -> dict[str, Any] | None:
        if not truth or "rows" not in truth:
            return None
        return rpo_check(j.rec, truth["rows"], j.t_fault, max_lost, workers=workers, nodes=nodes)


class LostUpdates(Check):
    """RPO of versioned rows: every row must have grown by at least its acknowledged increments
    (fewer: lost updates) and by at most its acknowledged and indeterminate ones (more: phantom
    updates)."""

    name = "rpo"
    reads = "versions"

    @classmethod
    def read(cls, workload: Any, conn: Any, before: Any) -> dict[str, Any]:
        return {"before": before, "after": workload.snapshot(conn)}

    @classmethod
    def judge(cls, truth: dict[str, Any] | None, j: Judging) -> dict[str, Any]:
        if not truth:
            return cls.unread(j)
        if truth.get("before") is None:
            return truth
        return lost_update_check(j.rec.row_updates, truth["before"], truth["after"], j.max_lost)


class BankTotal(Check):
    """Transfers between accounts conserve the total: after recovery it must be what it was."""

    name = "bank"
    reads = "bank"

    @classmethod
    def read(cls, workload: Any, conn: Any, before: Any) -> dict[str, Any]:
        accounts, total = workload.total(conn)
        return {"accounts": accounts, "total": total, "expected": workload.expected_total()}

    @classmethod
    def judge(cls, truth: dict[str, Any] | None, j: Judging) -> dict[str, Any]:
        if not truth:
            return cls.unread(j)
        if "total" not in truth:
            return truth
        return {"valid": truth["total"] == truth["expected"], "drift": truth["total"] - truth["expected"], **truth}
