"""`edit-coordinator status` and `top`: sessions, recent writes, refusals by code, locks held, leases and Redis
health of a root, once or refreshing. They only inspect: they never start the embedded Redis server (the
status then says it is not running, which is no failure: it stops when no session uses it; the sessions,
leases and refusals by code, which Redis holds, are said to be unknown rather than shown as none).

"Locks held now" is a probe: a shared, non-blocking flock on each lock file fails iff a writer holds it.
Lock files and history index files are named by the same hash of the path, so the history names the path.

With `--server URL --token T` (the admin token or a viewer token) the view comes from a remote `serve`'s
fleet view (GET /v1/dashboard) in the same data shape, rendered by the same `render_status`; only the locks
held, which the file host alone can probe, are said to be not available remotely."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import time
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.cli.repo import Repo, ago, duration, open_repo, rich_console, when
from coordinator.disk.layout import locks_dir, namespace_for
from coordinator.errors import CoordinatorError
from coordinator.history.retention import format_size


def register(sub: Any) -> None:
    from coordinator.client.operations import tokens_taken

    for name, helptext in (
        ("status", "sessions, recent writes, locks held now and Redis health"),
        ("top", "the status view, refreshing (for watching a fleet)"),
    ):
        p = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        p.add_argument(
            "--active-window", type=float, default=60.0,
            help="a session is active if it did something in the last this many seconds (default 60)",
        )  # fmt: skip
        p.add_argument("--recent", type=int, default=10, help="how many recent writes to show (default 10)")
        cmd_common.add_common(p)
        cmd_common.add_server(p, tokens_taken("admin", viewer=True))  # GET /v1/dashboard's
        if name == "top":
            p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
            p.add_argument("--iterations", type=int, default=0, help="stop after this many (0: until Ctrl-C)")
            p.set_defaults(func=cmd_common.guarded(cmd_top))
        else:
            p.set_defaults(func=cmd_common.guarded(cmd_status))


def probe_locks(repo: Repo) -> list[dict[str, Any]]:
    """The file locks held right now: a shared, non-blocking flock on each lock file fails iff a writer
    holds it. (A probe that succeeds holds the lock for microseconds; writers never wait longer.)"""
    lock_dir = locks_dir(repo.state_dir)
    held: list[dict[str, Any]] = []
    try:
        names = sorted(n for n in os.listdir(lock_dir) if n.endswith(".lock"))
    except FileNotFoundError:
        return held
    for name in names:
        try:
            fd = os.open(lock_dir / name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held.append({"lock": name, "path": _path_of_lock(repo, name)})
        except OSError:
            continue
        finally:
            os.close(fd)
    return held


def _path_of_lock(repo: Repo, lock_file: str) -> str | None:
    """Lock files and index files are both named by the hash of the path key; the history knows the key."""
    return repo.history().key_of(lock_file[: -len(".lock")])


def recent_writes(repo: Repo, n: int) -> list[dict[str, Any]]:
    """The `n` newest writes across files (the index files most recently appended, read from the end)."""
    if not repo.has_state:
        return []
    return [
        {"time": e.time, "path": e.path, "version": e.version, "session": e.session, "operation": e.operation}
        for e in repo.history().recent(n)
    ]


def _redis_section(repo: Repo, redis_url: str | None) -> tuple[dict[str, Any], Any]:
    """Redis health, and a client (or None). Never starts the embedded server."""
    from coordinator.state.embedded import embedded_status
    from coordinator.state.views import connect

    url = redis_url  # the option's default is $EDIT_COORDINATOR_REDIS_URL (cmd_common)
    info: dict[str, Any] = {"url": url, "embedded": url is None, "ok": False}
    if url is None:
        st = embedded_status(repo.state_dir) if repo.state_dir.is_dir() else None
        if st is None:
            info.update(not_running=True, error="the embedded Redis server is not running (it starts on first use)")
            return info, None
        url = info["url"] = st["url"]
        info["pid"] = st["pid"]
    client = connect(url, timeout=1.0)
    if not _probe_redis(client, info):
        client.close()
        return info, None
    return info, client


def _probe_redis(client: Any, info: dict[str, Any]) -> bool:
    """Fill `info` with ping time, version, memory and clients; False (and `info["error"]`) if it fails."""
    try:
        t0 = time.perf_counter()
        client.ping()
        info["ping_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        raw = client.info()
    except Exception as exc:
        info.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        return False
    info.update(
        ok=True,
        version=raw.get("redis_version"),
        used_memory=raw.get("used_memory"),
        clients=raw.get("connected_clients"),
        uptime_s=raw.get("uptime_in_seconds"),
    )
    return True


def _live_leases(client: Any, namespace: str) -> list[dict[str, Any]] | None:
    """The leases in force (see coordinator/state/leases.py), soonest end first; None if they cannot be read."""
    from coordinator.state.leases import LeaseStore

    try:
        live = LeaseStore(client, namespace).live()
    except Exception:
        return None
    return [lease.to_dict() for lease in sorted(live, key=lambda x: x.ends_at)]


def _sessions(store: Any, now: float, active_window: float) -> list[dict[str, Any]]:
    """The registered sessions, most recently seen first (CoordinatorError if Redis fails)."""
    return _sessions_of(store.sessions(), now, active_window)


def _sessions_of(seen: Any, now: float, active_window: float) -> list[dict[str, Any]]:
    rows = []
    for sid, t in sorted(seen, key=lambda st: st[1], reverse=True):
        idle = now - t
        state = "active" if idle <= active_window else "idle"
        rows.append({"session": sid, "last_seen": t, "idle_s": round(idle, 1), "state": state})
    return rows


NOT_RUNNING = "the embedded Redis server is not running"


def _from_redis(
    client: Any, repo: Repo, redis_info: dict[str, Any], now: float, active_window: float
) -> dict[str, Any]:
    """The part of the status that Redis holds: sessions, leases, refusals by code (with a note for each
    part that could not be read)."""
    from coordinator.state.views import StateStore

    out: dict[str, Any] = {"sessions": [], "sessions_note": "", "leases": [], "leases_note": "", "conflicts": None,
                           "conflicts_note": ""}  # fmt: skip
    if client is None or not redis_info.get("ok"):
        note = NOT_RUNNING if redis_info.get("not_running") else "Redis is not reachable"
        out.update(sessions_note=note, leases_note=note, conflicts_note=note)
        return out
    store = StateStore(client, namespace_for(repo.root))
    try:
        out["sessions"] = _sessions(store, now, active_window)
    except CoordinatorError as exc:
        redis_info.update(ok=False, error=exc.message)
    leases = _live_leases(client, store.ns)
    out["leases"] = leases or []
    out["leases_note"] = "could not be read" if leases is None else "" if leases else "none held"
    try:
        out["conflicts"] = {str(k): int(v) for k, v in store.error_counts().items()}
    except Exception as exc:
        out["conflicts_note"] = f"could not be read ({exc})"
    return out


def gather_status(
    repo: Repo, redis_url: str | None, active_window: float = 60.0, recent: int = 10, client: Any = None
) -> dict[str, Any]:
    """Everything `status` shows, as plain data. Uses `client` if given, else connects to a Redis that
    already runs (never starts one)."""
    now = time.time()
    own_client = client is None
    redis_info: dict[str, Any]
    if client is None:
        redis_info, client = _redis_section(repo, redis_url)
    else:
        redis_info = {"url": redis_url, "ok": False}
        _probe_redis(client, redis_info)
    try:
        held = _from_redis(client, repo, redis_info, now, active_window)
    finally:
        if own_client and client is not None:
            client.close()
    sessions = held["sessions"]
    return {
        "root": repo.root,
        "time": now,
        "redis": redis_info,
        "sessions": sessions,
        "sessions_note": held["sessions_note"],
        "active": sum(1 for s in sessions if s["state"] == "active"),
        "idle": sum(1 for s in sessions if s["state"] == "idle"),
        "recent_writes": recent_writes(repo, recent),
        "conflicts": held["conflicts"],
        "conflicts_note": held["conflicts_note"],
        "locks_held": probe_locks(repo),
        "leases": held["leases"],
        "leases_note": held["leases_note"],
        "history": history_size(repo),
        "hook_failures": _hook_failures(repo.root),
    }


def _hook_failures(root: str) -> dict[str, Any]:
    """The agents' hooks' own failures (coordinator/agents/failures.py): the hooks let the agent go on, so
    this is where a broken install shows."""
    from coordinator.agents.failures import status_part

    return status_part(root)


def history_size(repo: Repo) -> dict[str, int]:
    """The history's size, as the service reports it too (`Footprint`): versions recorded and bytes."""
    if not repo.has_state:
        return {"entries": 0, "bytes": 0}
    from coordinator.history.footprint import FootprintMeter

    size = FootprintMeter(repo.history()).measure()
    return {"entries": size.entries, "bytes": size.bytes}


def render_status(data: dict[str, Any], max_sessions: int = 20) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    now = data["time"]
    header = Text(
        f"edit-coordinator status  {data['root']}  {when(now)}\n"
        f"Sessions: {data['active']} active, {data['idle']} idle   History: {_history_text(data['history'])}"
    )
    health = _health_text(data["redis"])
    sessions = _sessions_view(data, now, max_sessions)
    writes: Any = Table(title="Recent writes", title_justify="left")
    for col in ("When", "Path", "Version", "Session", "Operation"):
        writes.add_column(col, justify="right" if col == "Version" else "left")
    for w in data["recent_writes"]:
        writes.add_row(ago(now - w["time"]), w["path"], str(w["version"]), w["session"], w["operation"])
    if not data["recent_writes"]:
        writes = Text("Recent writes: none recorded.", style="dim")
    if data["locks_held"]:
        locks: Any = Table(title="Locks held now", title_justify="left")
        locks.add_column("Path")
        for lk in data["locks_held"]:
            locks.add_row(lk["path"] or f"(lock {lk['lock']})")
    else:
        locks = Text(f"Locks held now: {data.get('locks_note') or 'none'}.")
    conflicts = _conflicts_view(data)
    leases = _leases_view(data, now)
    failed = Text("\n".join(data.get("hook_failures", {}).get("lines", [])), style="red")
    return Group(header, health, sessions, writes, locks, conflicts, leases, *([failed] if failed.plain else []))


def _sessions_view(data: dict[str, Any], now: float, max_sessions: int) -> Any:
    from rich.table import Table
    from rich.text import Text

    if not data["sessions"]:
        note = data.get("sessions_note")
        return Text(f"Sessions: {f'not available ({note})' if note else 'none seen'}.", style="dim")
    sessions = Table(title="Sessions", title_justify="left", expand=False)
    sessions.add_column("Session")
    sessions.add_column("State")
    sessions.add_column("Last activity")
    for s in data["sessions"][:max_sessions]:
        style = "green" if s["state"] == "active" else "dim"
        sessions.add_row(s["session"], Text(s["state"], style=style), ago(now - s["last_seen"]))
    if len(data["sessions"]) > max_sessions:
        sessions.caption = f"{len(data['sessions']) - max_sessions} more not shown"
    return sessions


def _health_text(r: dict[str, Any]) -> Any:
    """One line of Redis health, in the same words locally and through a service."""
    from rich.text import Text

    where = r.get("url") or ""
    if r.get("not_running"):  # not a failure: it stops when no session uses it and starts on first use
        return Text(f"Redis: {NOT_RUNNING} (it starts on first use; what it holds is kept).", style="dim")
    if not r.get("ok"):
        return Text(f"Redis: unavailable ({r.get('error', '?')})  {where}", style="red")
    mem = format_size(int(r["used_memory"])) if r.get("used_memory") is not None else "?"
    ping = r.get("ping_ms")
    return Text(
        f"Redis: ok  {where}  ping {'?' if ping is None else ping} ms  v{r.get('version') or '?'}  memory {mem}  "
        f"clients {r.get('clients') if r.get('clients') is not None else '?'}",
        style="green",
    )


def _history_text(h: dict[str, Any] | None) -> str:
    if not h:
        return "not reported"
    return f"{h['entries']} versions recorded ({format_size(int(h['bytes']))})"


def remote_status(client: Any, server: str, active_window: float = 60.0, recent: int = 10) -> dict[str, Any]:
    """`gather_status`'s data (the same shape, so `render_status` shows it in the same words) from a remote
    service's fleet view (`HttpClient.dashboard`: GET /v1/dashboard, the admin token or a viewer token)."""
    snap = client.dashboard()
    now = float(snap.get("now") or time.time())  # the service's clock: the ages are of its times
    health, notes = snap.get("health", {}), snap.get("notes", {})
    redis_info: dict[str, Any] = {
        "url": f"(through the service at {server})",
        "ok": bool(health.get("redis")),
        "ping_ms": health.get("ping_ms"),
        "version": health.get("redis_version"),
        "clients": health.get("connected_clients"),
        "used_memory": health.get("used_memory"),
    }
    if not redis_info["ok"]:
        redis_info["error"] = notes.get("redis") or "the service cannot reach its Redis"
    seen = snap.get("sessions", [])
    sessions = _sessions_of(((s["session"], s["last_seen"]) for s in seen), now, active_window)
    leases = sorted(snap.get("leases", []), key=lambda x: x["ends_at"])
    names = ("time", "path", "version", "session", "operation")
    writes = [{k: e[k] for k in names} for e in reversed(snap.get("events", []))][: max(recent, 0)]
    refused = "refusals" in notes
    return {
        "root": server,
        "time": now,
        "redis": redis_info,
        "sessions": sessions,
        "sessions_note": "could not be read" if "sessions" in notes else "",
        "active": sum(1 for s in sessions if s["state"] == "active"),
        "idle": sum(1 for s in sessions if s["state"] == "idle"),
        "recent_writes": writes,
        "conflicts": None if refused else {str(k): int(v) for k, v in snap["refusals"]["by_code"].items()},
        "conflicts_note": f"could not be read ({notes['refusals']})" if refused else "",
        "locks_held": [],
        "locks_note": "not available remotely (the file host's locks)",
        "leases": leases,
        "leases_note": "could not be read" if "leases" in notes else "" if leases else "none held",
        "history": snap.get("history") or None,
    }


def _gather(args: argparse.Namespace) -> dict[str, Any]:
    if not args.server:
        return gather_status(open_repo(args.root), args.redis_url, args.active_window, args.recent)
    client = cmd_common.open_client(args)
    try:
        return remote_status(client, args.server, args.active_window, args.recent)
    finally:
        client.close()


def cmd_status(args: argparse.Namespace) -> int:
    data = _gather(args)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        rich_console().print(render_status(data))
    return 0 if data["redis"].get("ok") or data["redis"].get("embedded") else 1


def cmd_top(args: argparse.Namespace) -> int:
    if args.server:
        return _remote_top(args)
    from rich.live import Live

    repo = open_repo(args.root)
    console = rich_console()
    count = 0
    client = None
    redis_url = args.redis_url
    try:
        with Live(console=console, auto_refresh=False, screen=console.is_terminal) as live:
            while True:
                if client is None:
                    info, client = _redis_section(repo, redis_url)
                    if client is not None:
                        redis_url = info["url"]
                data = gather_status(repo, redis_url, args.active_window, args.recent, client=client)
                if client is not None and not data["redis"].get("ok"):
                    client.close()
                    client = None
                    redis_url = args.redis_url
                live.update(render_status(data), refresh=True)
                count += 1
                if args.iterations and count >= args.iterations:
                    break
                time.sleep(max(args.interval, 0.1))
    except KeyboardInterrupt:
        pass
    finally:
        if client is not None:
            client.close()
    return 0


def _remote_top(args: argparse.Namespace) -> int:
    """`top` against a remote service: `remote_status` again every --interval seconds."""
    from rich.live import Live

    console = rich_console()
    client = cmd_common.open_client(args)
    count = 0
    try:
        with Live(console=console, auto_refresh=False, screen=console.is_terminal) as live:
            while True:
                data = remote_status(client, args.server, args.active_window, args.recent)
                live.update(render_status(data), refresh=True)
                count += 1
                if args.iterations and count >= args.iterations:
                    break
                time.sleep(max(args.interval, 0.1))
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
    return 0


def _conflicts_view(data: dict[str, Any]) -> Any:
    from rich.table import Table
    from rich.text import Text

    if data["conflicts"] is None:
        return Text(f"Refusals by code: not available ({data['conflicts_note']}).", style="dim")
    if not data["conflicts"]:
        return Text("Refusals by code: none.", style="dim")
    conflicts = Table(title="Refusals by code", title_justify="left")
    conflicts.add_column("Code")
    conflicts.add_column("Count", justify="right")
    for code, count in sorted(data["conflicts"].items(), key=lambda kv: -kv[1]):
        conflicts.add_row(code, str(count))
    return conflicts


def _leases_view(data: dict[str, Any], now: float) -> Any:
    from rich.table import Table
    from rich.text import Text

    if not data["leases"]:
        return Text(f"Leases: {data['leases_note'] or 'none held'}.", style="dim")
    leases = Table(title="Leases", title_justify="left")
    for col in ("Session", "Pattern", "Mode", "Ends"):
        leases.add_column(col)
    for lease in data["leases"]:
        left = lease["ends_at"] - now
        leases.add_row(lease["session"], lease["pattern"], lease["mode"], f"in {duration(left)}" if left > 0 else "now")
    return leases
