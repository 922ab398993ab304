"""Print the lowest versions that pyproject.toml allows, as a pip constraints file.

    python3 scripts/min_constraints.py --extra test > /tmp/minimum.txt
    python3 -m pip install --constraint /tmp/minimum.txt -e ".[test]"

Each requirement of `[project] dependencies` (and of the extras named with `--extra`) becomes one line
`name==LOWEST` (its marker kept), so that pip installs exactly the declared minimums or fails to resolve:
a lower bound that does not install with the others, or no longer works, shows up in CI instead of on a
user's machine that already had an old release. A requirement without a lower bound (`>=`, `==` or `~=`)
is an error: "any version" is a claim nobody tests. Standard library only (tomllib), so it runs before
anything is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

# name, optional [extras], the specifiers, optional "; marker" (PEP 508, without URLs).
_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<specs>[^;]*?)\s*(?:;\s*(?P<marker>.+))?$"
)
_SELF = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*\[(?P<extras>[^\]]*)\]\s*$")
_LOWER = re.compile(r"^(?:>=|==|~=)\s*(?P<version>[0-9][A-Za-z0-9.+!-]*)$")


class NoLowerBound(ValueError):
    """A requirement that names no lowest version."""


def lower_bound(requirement: str) -> str:
    """The constraint line `name==LOWEST[; marker]` for one PEP 508 requirement string."""
    m = _REQUIREMENT.match(requirement)
    if m is None:
        raise NoLowerBound(f"cannot parse requirement {requirement!r}")
    versions = [
        lm.group("version") for spec in m.group("specs").split(",") if (lm := _LOWER.match(spec.strip())) is not None
    ]
    if not versions:
        raise NoLowerBound(
            f"{requirement!r} has no lower bound: give it one (>=X) that is a release known to work with the rest"
        )
    if len(versions) > 1:
        raise NoLowerBound(f"{requirement!r} has several lower bounds: keep one")
    name = _normal(m.group("name"))
    marker = m.group("marker")
    return f"{name}=={versions[0]}" + (f"; {marker}" if marker else "")


def requirements(pyproject: dict, extras: Iterable[str]) -> list[str]:
    """The core requirements and those of the named extras; an extra that names the project itself
    (`"edit-coordinator[bench]"`) brings in that extra's requirements instead."""
    project = pyproject["project"]
    self_name = _normal(project["name"])
    optional = project.get("optional-dependencies", {})
    found = list(project.get("dependencies", []))
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in optional:
            raise NoLowerBound(f"pyproject.toml has no extra {extra!r} (it has: {', '.join(sorted(optional))})")
        for req in optional[extra]:
            m = _SELF.match(req)
            if m is not None and _normal(m.group("name")) == self_name:
                todo.extend(e.strip() for e in m.group("extras").split(","))
            else:
                found.append(req)
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def constraints(pyproject: dict, extras: Iterable[str]) -> list[str]:
    """One line per distinct requirement, in pyproject.toml's order."""
    lines: list[str] = []
    for req in requirements(pyproject, extras):
        line = lower_bound(req)
        if line not in lines:
            lines.append(line)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extra", action="append", default=[], help="include this extra's requirements (repeatable)")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT, help="default: the repository's pyproject.toml")
    args = parser.parse_args(argv)
    try:
        lines = constraints(tomllib.loads(args.pyproject.read_text()), args.extra)
    except NoLowerBound as exc:
        print(f"min_constraints: {exc}", file=sys.stderr)
        return 1
    print(f"# The declared minimums of {args.pyproject.name} (extras: {', '.join(args.extra) or 'none'}).")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
