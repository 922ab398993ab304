"""`init gemini --subfolders`: a guard in the user's Gemini CLI settings for a start from a subfolder.

Gemini CLI reads `.gemini/settings.json` of the folder it was started in only (checked in 0.61.0: its
`loadSettings(process.cwd())`), so started from a subfolder of a hooked repository it runs none of the
repository's hooks, and its edits land unguarded without a word. Its user settings (`~/.gemini/settings.json`)
load in every folder: the guard written there is one BeforeTool handler on `write_file` and `replace` that
refuses the write when the start folder holds no edit-coordinator hooks of its own but a folder above it
does, and says where to start Gemini CLI instead. It is a shell command (no interpreter: nothing of this
installation has to be there, so a moved or removed installation cannot make it refuse anything), and it
lets everything through outside such repositories. The hook's working folder is Gemini CLI's start folder
(its hook runner spawns with `cwd: input.cwd`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

GUARD_NAME = "edit-coordinator-subfolders"
EVENT = "BeforeTool"
MATCHER = "^(write_file|replace)$"

# What marks a folder's .gemini/settings.json as holding our hooks: the fast client (hookclient.py gemini) or
# the `hook gemini` command (coordinator.agents.settings._OUR_COMMAND). The brackets keep the pattern from
# matching its own text in the user's file (which the walk also skips, as Gemini CLI does for workspace settings).
_MARK = "hook[c]lient[.]py[^ ]* gemin[i]|hook gemin[i] "
_SCRIPT = (
    "here=$(pwd -P); m='" + _MARK + "'; "
    'grep -Eqs "$m" "$here/.gemini/settings.json" && exit 0; '
    "d=$here; "
    'while [ "$d" != / ] && [ -n "$d" ]; do '
    'd=${d%/*}; [ -n "$d" ] || d=/; [ "$d" = "$HOME" ] && continue; '
    'if [ -f "$d/.gemini/settings.json" ] && grep -Eqs "$m" "$d/.gemini/settings.json"; then '
    'echo "Refused by edit-coordinator: Gemini CLI was started in $here, a subfolder of the repository $d, '
    "and loads the repository's hooks (its .gemini/settings.json) only when started at its top, so this "
    "write could not be checked against the other sessions' work. Nothing was written. Ask the user to "
    'start Gemini CLI in $d (cd $d && gemini)." >&2; exit 2; fi; '
    "done; exit 0"
)


def handler() -> dict[str, Any]:
    return {
        "name": GUARD_NAME,
        "type": "command",
        "command": _SCRIPT,
        "timeout": 10_000,
        "description": "edit-coordinator: refuse writes of a session started in a subfolder of a hooked repository",
    }


def user_settings(home: Path | None = None) -> Path:
    return (home if home is not None else Path.home()) / ".gemini" / "settings.json"


def present(settings: dict[str, Any]) -> bool:
    """Whether `settings` holds the guard as this version writes it."""
    return any(h == handler() for h in _ours(settings))


def _ours(settings: dict[str, Any]) -> list[dict[str, Any]]:
    groups = settings.get("hooks", {}).get(EVENT, []) if isinstance(settings.get("hooks"), dict) else []
    return [
        h
        for g in groups
        if isinstance(g, dict) and isinstance(g.get("hooks"), list)
        for h in g["hooks"]
        if isinstance(h, dict) and h.get("name") == GUARD_NAME
    ]


def without(settings: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`settings` without the guard (any version of it); a group, list or table left empty by that goes too."""
    if not _ours(settings):
        return settings, False
    out = dict(settings)
    hooks = dict(out["hooks"])
    groups = []
    for g in hooks[EVENT]:
        if isinstance(g, dict) and isinstance(g.get("hooks"), list):
            kept = [h for h in g["hooks"] if not (isinstance(h, dict) and h.get("name") == GUARD_NAME)]
            if not kept:
                continue
            g = {**g, "hooks": kept}
        groups.append(g)
    if groups:
        hooks[EVENT] = groups
    else:
        del hooks[EVENT]
    if hooks:
        out["hooks"] = hooks
    else:
        del out["hooks"]
    return out, True


def with_guard(settings: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`settings` with the guard (an earlier version of it replaced); everything else kept as it was."""
    if present(settings) and len(_ours(settings)) == 1:
        return settings, False
    out, _ = without(settings)
    hooks = dict(out.get("hooks", {}))
    hooks[EVENT] = [*hooks.get(EVENT, []), {"matcher": MATCHER, "hooks": [handler()]}]
    return {**out, "hooks": hooks}, True


def apply(mode: str, home: Path | None = None) -> tuple[int, list[str]]:
    """Write (`init`), check or remove the guard in the user's settings: the exit status and what to print."""
    from coordinator.agents import settings as st

    path = user_settings(home)
    current, _exists = st.load(path, str(path), frozenset({EVENT}))
    if mode == "check":
        if present(current):
            return 0, [f"  the subfolder guard is in {path}"]
        return 1, [f"  missing: the subfolder guard in {path} (`edit-coordinator init gemini --subfolders`)"]
    changed_to, changed = without(current) if mode == "remove" else with_guard(current)
    if not changed:
        said = "holds no subfolder guard" if mode == "remove" else "already has the subfolder guard"
        return 0, [f"  {path} {said}; nothing changed."]
    text = st.render(changed_to, st.indent_of(path.read_text(encoding="utf-8")) if _exists else 2)
    st.save(path, text)
    verb = "took the subfolder guard out of" if mode == "remove" else "wrote the subfolder guard into"
    return 0, [f"  {verb} {path}: a write of Gemini CLI started in a subfolder of a hooked repository is refused"]
