"""`edit-coordinator gc`: apply the history retention policy (retention.py decides what is kept and how;
this command reads the policy, applies the flags and reports)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.cli.repo import open_repo
from coordinator.history.retention import RetentionPolicy, collect, format_size, parse_size


def register(sub: Any) -> None:
    p = sub.add_parser(
        "gc",
        help="apply the history retention policy (versions per file, total bytes)",
        description=(
            "Drop the oldest history entries beyond the retention caps and delete the stored contents no "
            "kept entry refers to. The newest version of every file is always kept. The policy is read "
            "from <root>/.edit-coordinator/retention.json; flags override it (--save stores them)."
        ),
    )
    p.add_argument("--keep-versions", type=int, default=None, help="versions to keep per file")
    p.add_argument("--max-bytes", default=None, help="total size of stored contents, e.g. 500M or 2G")
    p.add_argument("--save", action="store_true", help="store the given caps as this repository's policy")
    p.add_argument("--dry-run", action="store_true", help="show what would be removed, change nothing")
    cmd_common.add_common(p, redis=False)
    p.set_defaults(func=cmd_common.guarded(cmd_gc))


def cmd_gc(args: argparse.Namespace) -> int:
    repo = open_repo(args.root)
    if not repo.has_state:
        print("No history here: nothing to collect.")
        return 0
    policy = RetentionPolicy.load(repo.state_dir)
    policy = RetentionPolicy(
        max_versions_per_file=args.keep_versions if args.keep_versions is not None else policy.max_versions_per_file,
        max_total_bytes=parse_size(args.max_bytes) if args.max_bytes is not None else policy.max_total_bytes,
    )
    if args.save:
        policy.save(repo.state_dir)
    report = collect(repo.state_dir, policy, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    verb = "Would drop" if report.dry_run else "Dropped"
    print(
        f"{verb} {report.entries_dropped} of {report.entries_total} history entries"
        + ("" if report.dry_run else f" (in {report.files_rewritten} files)")
        + f"; {'would remove' if report.dry_run else 'removed'} {report.objects_removed} of "
        f"{report.objects_total} stored contents ({format_size(report.bytes_removed)})."
    )
    print(
        f"Kept: {format_size(report.bytes_after)} (cap {format_size(policy.max_total_bytes)}, "
        f"at most {policy.max_versions_per_file} version{'s' if policy.max_versions_per_file != 1 else ''} "
        "per file)."
    )
    for note in report.notes:
        print(f"Note: {note}")
    return 0
