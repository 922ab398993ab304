"""The verdict of a fleet run: its exit status and one plain sentence saying what happened.

One owner for the rule that `edit-coordinator stress` and `edit-coordinator bench` apply, so that a run
which did not do the work never passes:

| status | through the coordinator (or over HTTP)                | with `--unsafe` (no coordinator)              |
|--------|--------------------------------------------------------|-----------------------------------------------|
| 0      | edits were acknowledged, and every one of them is in    | loss was demonstrated: acknowledged edits     |
|        | the files; no file or read was torn                     | are missing, or files/reads were torn         |
| 1      | the oracle found a fault: an acknowledged edit lost,    | nothing was lost this time (too little        |
|        | a torn file or read, a write nobody made                | contention to show anything), see `hint`      |
| 2      | the run did no work: no call completed, or every call  | the same                                      |
|        | was refused (nothing acknowledged), or a worker crashed |                                               |

A run that could not even start (bad options, Redis unreachable before the fleet starts) also exits 2; the
command reports that itself. Why `--unsafe` exits 0 on loss: it is a demonstration, and 0 means that it
showed what it exists to show; its output says plainly that the edits were lost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

OK = 0
FAULT = 1
NO_WORK = 2

# What to do next, by the refusal code that dominated a run in which nothing was acknowledged.
_HINTS = {
    "state_unavailable": "Redis could not be reached: check --redis-url (or omit it to use the embedded server).",
    "lock_timeout": "the file locks could not be had in time: is another process holding them?",
    "permission_denied": "the OS refused access to the files or the state folder.",
    "io_error": "the disk failed (full or read-only?).",
}


class OracleFindings(Protocol):
    """What the verdict needs from `worker.fleet.OracleReport`."""

    ok: bool
    lost_updates: int
    verified: int
    torn_files: list[str]
    torn_reads: int
    details: list[str]


@dataclass(frozen=True)
class Verdict:
    exit_code: int
    headline: str  # one sentence for the end of the output
    hint: str = ""  # what to do next, when there is something to do

    @property
    def passed(self) -> bool:
        return self.exit_code == OK


def judge(
    summary: Mapping[str, Any], report: OracleFindings, *, unsafe: bool, worker_errors: Sequence[str] = ()
) -> Verdict:
    """The verdict for one run, from `worker.fleet.summarize(run)` and the oracle's report."""
    if worker_errors:
        return Verdict(NO_WORK, f"{len(worker_errors)} worker(s) crashed: the run is not a valid test.")
    no_work = _no_work(summary)
    if no_work is not None:
        return no_work
    acked = int(summary["acknowledged"])
    damage = _damage(report, acked)
    if unsafe:
        if damage:
            return Verdict(
                OK, f"As intended, --unsafe demonstrated what the coordinator prevents: without it, {damage}."
            )
        return Verdict(
            FAULT,
            f"--unsafe lost nothing this time ({acked:,} edits acknowledged, all in the files): too little "
            "contention to demonstrate anything, not evidence that plain read-modify-write is safe.",
            "Raise --workers, lower --files, or run longer (--duration).",
        )
    if damage or not report.ok:
        found = damage or (report.details[0] if report.details else "the oracle found a fault in the files")
        return Verdict(FAULT, f"FAILED: {found}.")
    return Verdict(OK, f"OK: all {acked:,} acknowledged edits are in the files, and no file or read was torn.")


def _no_work(summary: Mapping[str, Any]) -> Verdict | None:
    """A run that completed no call, or in which every call was refused: it tested nothing."""
    attempts = int(summary.get("attempts", 0))
    reads = int(summary.get("reads", 0))
    if attempts + reads == 0:
        return Verdict(
            NO_WORK,
            "Nothing was done: no session completed a single read or edit, so nothing was tested.",
            "Check that the workers could start and reach the coordinator (see the errors above).",
        )
    if int(summary.get("acknowledged", 0)) > 0:
        return None
    refused: dict[str, int] = dict(summary.get("refused") or {})
    reads_refused = int(summary.get("reads_refused", 0))
    total = sum(refused.values()) + reads_refused
    by_code = ", ".join(f"{code}: {n:,}" for code, n in sorted(refused.items(), key=lambda kv: -kv[1]))
    detail = f" ({by_code}; reads refused: {reads_refused:,})" if by_code else f" ({reads_refused:,} reads refused)"
    top = max(refused, key=lambda c: refused[c]) if refused else "state_unavailable"
    return Verdict(
        NO_WORK,
        f"Nothing was acknowledged: all {total:,} calls were refused{detail}, so nothing was tested.",
        _HINTS.get(top, "see the refusal codes above."),
    )


def _damage(report: OracleFindings, acked: int) -> str:
    """What the oracle found missing or torn, as a phrase ('' when nothing)."""
    parts = []
    if report.lost_updates:
        share = f" ({report.lost_updates / acked:.0%})" if acked else ""
        parts.append(f"{report.lost_updates:,} of {acked:,} acknowledged edits were lost{share}")
    if report.torn_files:
        parts.append(f"{len(report.torn_files)} file(s) were left torn")
    if report.torn_reads:
        parts.append(f"{report.torn_reads:,} read(s) saw a torn file")
    return "; ".join(parts)
