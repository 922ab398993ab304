"""File system access: paths confined to the root, safe opens, atomic replace.

Invariants enforced here:
- Nothing outside the root: a path is resolved (symlinks included) and must land inside the root; the
  folder is then opened and its real location checked through the descriptor, and every later operation
  is relative to that descriptor, so swapping a folder for a symlink after the check cannot redirect a write.
- Never block on a FIFO or device: the file type is checked before opening, the open is non-blocking and
  refuses symlinks, and the type is checked again on the descriptor.
- No torn file: new content goes to a temporary file that is then renamed over the target with
  `os.replace`; a reader, or a crash at any instant, sees the old content or the new.
- No temporary files in the repository: temporaries live in the state folder (same file system, so the
  rename stays atomic); only where the state folder is on another file system does one go next to the target.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import itertools
import os
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coordinator.disk.layout import STATE_DIR_NAME, is_state_key
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.frozen import fast_init

MAX_PATH_CHARS = 4096
MAX_NAME_BYTES = 255

_tmp_counter = itertools.count()
_tmp_lock = threading.Lock()

# This process's id, kept: os.getpid() is a system call, and a write asked for it several times.
#: This process's id in a one-element list, for the write path's fork checks (`PID[0]`: a subscript, not
#: a call). The same invariant as `this_pid`: renewed in a child made by os.fork by the at-fork hook.
PID = [os.getpid()]


def _forked() -> None:
    PID[0] = os.getpid()


os.register_at_fork(after_in_child=_forked)


def this_pid() -> int:
    """os.getpid() without the system call. Invariant: kept right in a child made by os.fork (and so by
    multiprocessing's fork), whose at-fork hook renews it; subprocess's child runs no Python before exec."""
    return PID[0]


@fast_init
@dataclass(frozen=True)
class ResolvedPath:
    """A path inside the root. `key` (POSIX, relative to the root) names it in locks, Redis and history."""

    key: str
    abs: str
    parent: str
    name: str
    shown: str  # the path as the caller gave it, for messages


def validate_path_argument(path: object) -> str:
    if not isinstance(path, str | os.PathLike):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "file_path must be a string path.")
    p = os.fspath(path)
    if isinstance(p, bytes):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "file_path must be text, not bytes.")
    if not p.strip():
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "file_path is empty; give a path inside the root.")
    if "\x00" in p:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "file_path contains a NUL byte; remove it.")
    if len(p) > MAX_PATH_CHARS:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"file_path is longer than {MAX_PATH_CHARS} characters.")
    if "\\" in p:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"file_path {p!r} contains a backslash; use forward slashes (/) to separate folders.",
        )
    try:
        p.encode("utf-8")
    except UnicodeEncodeError:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, "file_path is not valid Unicode text (lone surrogates)."
        ) from None
    for part in p.split("/"):
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, f"A path component is longer than {MAX_NAME_BYTES} bytes."
            )
    return p


def resolve(root: str, path: object) -> ResolvedPath:
    """Resolve `path` (relative to `root`, or absolute inside it) to its real location inside the root.

    Messages name paths as the caller gave them, or relative to the root, never the server's absolute paths
    (a remote caller must not learn where the root is, or where a link outside it points): a path leading
    outside is only said to lead "outside the repository".
    """
    shown = validate_path_argument(path)
    real = _below_real_root(root, shown) or _realpath(_joined(root, shown), shown)
    if real == root:
        raise CoordinatorError(
            ErrorCode.IS_DIRECTORY, f"{shown!r} is the repository's root folder itself, not a file; give a file path."
        )
    base = root.rstrip("/")  # "" for the root "/"
    if not real.startswith(base + "/"):  # outside (the root itself is refused above)
        if os.path.abspath(_joined(root, shown)) != real:  # no other path to give: say what the link does
            raise CoordinatorError(
                ErrorCode.OUTSIDE_ROOT,
                f"{shown!r} leads outside the repository through a symlink, to a file that is not the "
                "repository's; nothing was read or written. Only files inside the repository can be read or "
                "changed through the coordinator.",
            )
        raise CoordinatorError(
            ErrorCode.OUTSIDE_ROOT,
            f"{shown!r} leads outside the repository. Only files inside the repository can be read or changed; "
            "give a path relative to its root.",
        )
    key = real[len(base) + 1 :]  # real is inside root (checked above), so a plain slice
    if is_state_key(key):
        raise CoordinatorError(
            ErrorCode.OUTSIDE_ROOT,
            f"{shown!r} is inside the coordinator's own state folder ({STATE_DIR_NAME}/), which agents "
            "may not read or change. Use the history and undo tools instead.",
        )
    parent, _, name = real.rpartition("/")  # os.path.split of a real path (absolute, no trailing slash)
    return ResolvedPath(key=key, abs=real, parent=parent or "/", name=name, shown=shown)


def _joined(root: str, shown: str) -> str:
    return shown if shown.startswith("/") else os.path.join(root, shown)


@functools.lru_cache(maxsize=64)
def _is_real(root: str) -> bool:
    return os.path.realpath(root) == root


def _below_real_root(root: str, shown: str) -> str | None:
    """realpath(root/shown) without walking the root's own ancestors: for a relative path of plain names
    under a root that is its own real path (a Coordinator's is), one lstat per name, from the root down.
    None (the caller walks the whole path with realpath) on anything else: an absolute path, ".", "..", an
    empty name, a symlink on the way, an error other than a missing name. A name that does not exist ends
    the walk: nothing below it exists either, so nothing below it is a link. (Writes and reads do not rest
    on this answer: they open every folder through a checked descriptor, with O_NOFOLLOW.)"""
    if shown.startswith("/") or not _is_real(root):
        return None
    names = shown.split("/")
    if any(n in ("", ".", "..") for n in names):
        return None
    base = root.rstrip("/")  # "" for the root "/"
    here = base
    for name in names:
        here += "/" + name
        try:
            if stat.S_ISLNK(os.lstat(here).st_mode):
                return None
        except FileNotFoundError:
            break
        except OSError:
            return None
    return base + "/" + shown


def _realpath(joined: str, shown: str) -> str:
    """os.path.realpath, which raises OSError when a link on the path is swapped for a file (or back) while
    it walks it (lstat says link, readlink then fails with EINVAL). Tried again, then refused: no OSError
    leaves this function."""
    last: OSError | None = None
    for _ in range(3):
        try:
            return os.path.realpath(joined)
        except OSError as exc:
            last = exc
    assert last is not None
    if last.errno in (errno.EACCES, errno.EPERM):
        raise CoordinatorError(
            ErrorCode.PERMISSION_DENIED,
            f"The operating system refused to look up {shown!r} (permission denied on a folder or link on the "
            "way); nothing was read or written. Check the folders' permissions, or choose another path.",
        )
    raise CoordinatorError(
        ErrorCode.OUTSIDE_ROOT,
        f"{shown!r} kept changing (links swapped) while it was being resolved; nothing was read or written. Try again.",
    )


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


def open_parent(rp: ResolvedPath, root: str, create: bool = False, root_fd: int | None = None) -> int:
    """Open the folder that holds `rp` and return a new descriptor of it, proven to be inside the root.

    The folder is reached from the root one component at a time, each opened relative to its (already
    opened) parent with O_NOFOLLOW | O_DIRECTORY; with `create`, a missing folder is made with mkdirat
    relative to that same parent descriptor, then opened the same way. So no folder is ever made or opened
    through a symlink, whatever another process swaps meanwhile: `rp.key` has no links in it (it is a real
    path), and a link found on the way now is a swap, refused as `outside_root`. A missing folder (without
    `create`) is `file_not_found`; no OSError escapes. `root_fd`: the root, kept open by the caller (saves
    opening it by path on every call); it is not closed here.
    """
    parts = rp.key.split("/")[:-1]
    try:
        if root_fd is None:
            dfd = os.open(root, _DIR_FLAGS)
        elif not parts:
            return os.dup(root_fd)
        else:
            dfd = root_fd
    except OSError as exc:
        raise os_error(exc, rp) from exc
    try:
        for i, name in enumerate(parts):
            child = _open_child(dfd, name, rp, i, create)
            if dfd != root_fd:
                os.close(dfd)
            dfd = child
        if parts:
            _check_descriptor_inside(dfd, rp, root)
    except BaseException:
        if dfd != root_fd:
            os.close(dfd)
        raise
    return dfd


def _open_child(dfd: int, name: str, rp: ResolvedPath, depth: int, create: bool) -> int:
    """Open folder `name` in the folder `dfd` (making it first with `create`), never through a link."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        if not create:
            raise CoordinatorError(
                ErrorCode.FILE_NOT_FOUND, f"The folder of {rp.shown!r} does not exist.", path=rp.key
            ) from None
    except NotADirectoryError:
        raise _not_a_folder(dfd, name, rp, depth) from None
    except OSError as exc:
        raise os_error(exc, rp) from exc
    try:
        os.mkdir(name, 0o777, dir_fd=dfd)
    except FileExistsError:
        pass  # made by another process meanwhile: opened (and so checked) below like any other folder
    except OSError as exc:
        raise os_error(exc, rp) from exc
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except NotADirectoryError:
        raise _not_a_folder(dfd, name, rp, depth) from None
    except OSError as exc:
        raise os_error(exc, rp) from exc


def _not_a_folder(dfd: int, name: str, rp: ResolvedPath, depth: int) -> CoordinatorError:
    """ENOTDIR on the way: a plain file where a folder should be, or a folder swapped for a link."""
    folder = "/".join(rp.key.split("/")[: depth + 1])
    try:
        mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
        swapped = stat.S_ISLNK(mode) or stat.S_ISDIR(mode)  # a folder now: it was a link a moment ago
    except OSError:
        swapped = True  # it changed again: a race either way
    if swapped:
        return CoordinatorError(
            ErrorCode.OUTSIDE_ROOT,
            f"The folder {folder!r} on the way to {rp.shown!r} was replaced by a link while it was being opened; "
            "nothing was read or written. Try again.",
            path=rp.key,
        )
    return CoordinatorError(
        ErrorCode.FILE_NOT_FOUND,
        f"{folder!r} is a file, not a folder, so {rp.shown!r} cannot exist.",
        path=rp.key,
    )


def _check_descriptor_inside(dfd: int, rp: ResolvedPath, root: str) -> None:
    """Belt and braces after the walk: where the kernel says the descriptor is (a folder moved out of the
    root while it was walked would show here)."""
    try:
        actual = os.readlink(f"/proc/self/fd/{dfd}")
    except OSError:
        return  # no /proc: the component-wise walk is the proof
    if not _inside(actual, root):
        raise CoordinatorError(
            ErrorCode.OUTSIDE_ROOT,
            f"The folder of {rp.shown!r} was moved or replaced while it was being opened; nothing was read or "
            "written. Try again.",
            path=rp.key,
        )


def list_parent(rp: ResolvedPath, root: str, root_fd: int | None = None) -> list[str]:
    """The names in the folder of `rp`, listed through a checked descriptor (never through a swapped link);
    [] when the folder cannot be opened."""
    try:
        dfd = open_parent(rp, root, root_fd=root_fd)
    except CoordinatorError:
        return []
    try:
        return os.listdir(dfd)
    except OSError:
        return []
    finally:
        os.close(dfd)


def lstat_at(dfd: int, rp: ResolvedPath) -> os.stat_result | None:
    try:
        return os.stat(rp.name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_error(exc, rp) from exc


def check_regular(st: os.stat_result, rp: ResolvedPath, max_bytes: int) -> None:
    """Refuse anything but a regular file within the size cap, before it is ever opened."""
    mode = st.st_mode
    if stat.S_ISREG(mode) and st.st_size <= max_bytes:
        return
    if stat.S_ISDIR(mode):
        raise CoordinatorError(
            ErrorCode.IS_DIRECTORY,
            f"{rp.shown!r} is a directory, not a file. List it with a shell command, or give a file path.",
            path=rp.key,
        )
    if stat.S_ISLNK(mode):
        raise CoordinatorError(
            ErrorCode.OUTSIDE_ROOT,
            f"{rp.shown!r} was replaced by a symlink while it was being opened; nothing was read or written. "
            "Try again.",
            path=rp.key,
        )
    if not stat.S_ISREG(mode):
        kind = (
            "FIFO"
            if stat.S_ISFIFO(mode)
            else "socket"
            if stat.S_ISSOCK(mode)
            else "device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "special file"
        )
        raise CoordinatorError(
            ErrorCode.SPECIAL_FILE,
            f"{rp.shown!r} is a {kind}, not a regular file; it cannot be read or edited with this tool.",
            path=rp.key,
        )
    if st.st_size > max_bytes:
        raise CoordinatorError(
            ErrorCode.TOO_LARGE,
            f"{rp.shown!r} is {st.st_size} bytes, over the limit of {max_bytes} bytes for any file; "
            "it cannot be read or edited with this tool.",
            path=rp.key,
            size=st.st_size,
            limit=max_bytes,
        )


def check_writable(dfd: int, rp: ResolvedPath, st: os.stat_result) -> None:
    """Refuse to change a file that the OS would not let this process open for writing.

    Replacing a file (a temporary renamed over it) needs write permission on its folder only, so without
    this check a file of mode 0444 would be replaced without a word. The rule applied is the OS's own:
    faccessat(W_OK) with the effective user and group ids, which weighs the permission bits, access control
    lists, the immutable flag and read-only mounts exactly as an open for writing would. Consequence, by
    decision: root, whom the kernel lets open any file for writing, may change a 0444 file (as
    `open(path, "w")` or `cp` as root would); an immutable file (`chattr +i`) or a read-only mount refuses
    even root. `st` is the file's stat, read under the lock (for the message).
    """
    try:
        ok = os.access(rp.name, os.W_OK, dir_fd=dfd, effective_ids=True, follow_symlinks=False)
    except NotImplementedError:  # no faccessat with these flags here: the plain check on the name
        ok = os.access(rp.name, os.W_OK, dir_fd=dfd)
    if ok:
        return
    mode = st.st_mode & 0o7777
    if lstat_at(dfd, rp) is None:
        raise CoordinatorError(
            ErrorCode.STALE,
            f"{rp.shown!r} was removed by another program while it was being changed; nothing was written. "
            "Read it again (or create it with Write).",
            path=rp.key,
        )
    try:
        read_only_fs = bool(os.statvfs(dfd).f_flag & os.ST_RDONLY)
    except OSError:
        read_only_fs = False
    if read_only_fs:
        why = "it is on a read-only file system"
    elif not mode & 0o222:
        why = f"it is read-only (mode {mode:04o})"
    else:
        why = (
            f"this user may not write it (mode {mode:04o}, owner uid {st.st_uid}; or an immutable flag or "
            "access control list forbids it)"
        )
    raise CoordinatorError(
        ErrorCode.PERMISSION_DENIED,
        f"{rp.shown!r} cannot be changed: {why}; nothing was written. If it is meant to be changed, make it "
        f"writable first (for example `chmod u+w {rp.key}`); otherwise leave it as it is.",
        path=rp.key,
    )


_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_S_ISREG = stat.S_ISREG


def read_at(dfd: int, rp: ResolvedPath, max_bytes: int) -> tuple[bytes, os.stat_result] | None:
    """Read a regular file relative to `dfd`. None if it does not exist. Never blocks on special files.

    A file with several hard links is read like any other, even if another link is outside the root (a
    decision, see the README's Semantics: pnpm and `cp -l` trees are legitimate, the other links cannot be
    found, and only someone who could read the file can link it); a write never goes through the link,
    since `atomic_replace` puts a new file in place of the name.
    """
    try:
        st = os.stat(rp.name, dir_fd=dfd, follow_symlinks=False)  # (`lstat_at`, inline: every write runs it)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_error(exc, rp) from exc
    if not (_S_ISREG(st.st_mode) and st.st_size <= max_bytes):
        check_regular(st, rp, max_bytes)
    try:
        fd = os.open(rp.name, _READ_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            again = lstat_at(dfd, rp)
            if again is not None:
                check_regular(again, rp, max_bytes)
        raise os_error(exc, rp) from exc
    try:
        st = os.fstat(fd)
        if not (_S_ISREG(st.st_mode) and st.st_size <= max_bytes):
            check_regular(st, rp, max_bytes)
        want = st.st_size + 1
        first = os.read(fd, max(want, 65536))
        if len(first) == want - 1:  # the size it was stat'd with: the file whole (its end follows)
            return first, st
        return _read_on(fd, first, max(want, 65536), rp, max_bytes), st
    except OSError as exc:
        raise os_error(exc, rp) from exc
    finally:
        os.close(fd)


def _read_on(fd: int, first: bytes, size: int, rp: ResolvedPath, max_bytes: int) -> bytes:
    """The rest of a file whose first read (`first`) was not its stat'd size: read to its end, refused
    once it passes `max_bytes` (it grew while it was read)."""
    chunks: list[bytes] = []
    total = 0
    chunk = first
    while chunk:
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise CoordinatorError(
                ErrorCode.TOO_LARGE,
                f"{rp.shown!r} grew past the limit of {max_bytes} bytes while it was read.",
                path=rp.key,
            )
        chunk = os.read(fd, size)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks) if chunks else b""


def temp_name(name: str) -> str:
    """A temporary's name, unique in this process and across processes (`clean_stale_temps` reads its pid)."""
    with _tmp_lock:
        n = next(_tmp_counter)
    return f".{name[:100]}.ec-{PID[0]}-{n}.tmp"


def atomic_replace(
    dfd: int,
    rp: ResolvedPath,
    data: bytes,
    mode: int,
    fsync: bool,
    tmp_dfd: int | None = None,
    owner: tuple[int, int] | None = None,
    old_names: list[str] | None = None,
    spare: tuple[str, int] | None = None,
    spare_owner: tuple[int, int] | None = None,
) -> os.stat_result:
    """Write `data` to a temporary file, then put it in `rp`'s place (atomic). Returns the new file's stat.

    The temporary lives in `tmp_dfd` (the state folder) when given and on the same file system; the caller
    passes None to put it next to the target. On any error the temporary is removed and the target is as it
    was. `old_names`: when given, the old content that a swap left in `tmp_dfd` is not unlinked here; its
    name is appended, for the caller to remove with `remove_temp` once it has released the file's lock
    (the unlink is, with the temporary's creation, the replace's costliest call, and nothing under the
    lock needs it done). `spare`: an empty temporary made ahead in `tmp_dfd` (its name and a descriptor
    open for writing, `spares.SpareTemps.take`; it needs `tmp_dfd`), filled instead of creating one here.
    `owner`: the (uid, gid) to give the new file (None: it keeps what it is created with); `spare_owner`:
    the one the spare was created with (`SpareTemps.owner`), so that giving it that same owner again is
    skipped (a root process replacing its own files saves an fchown per write).

    How the new file takes the old one's place, per durability (measured syscall by syscall with
    scripts/replace_probe.py, figures in BENCHMARKS.md, "Figures behind design choices"; README "Durability"):
    - fsync=True: fsync the temporary, rename(2) it over the target, fsync the folder. After a process
      crash the file is the old or the new content, whole; after a power loss too, and an acknowledged
      write is on disk. (The rename is cheap here: the data is already on disk; the fsyncs cost ms.)
    - fsync=False: renameat2(RENAME_EXCHANGE) swaps the temporary and the target, then the old content,
      now under the temporary's name in the state folder, is unlinked, here or by the caller after the
      lock (`old_names`) (several times cheaper than a rename over an existing file, which on ext4 starts
      the new data's writeback). After a process crash
      the file is the old or the new content, whole (a crash between swap and unlink leaves the old content
      as a temporary, removed when a coordinator next opens the state folder). After a power loss there is
      no promise: a file replaced in the last seconds may come back old, new, or empty (the swap skips
      ext4's writeback-on-rename). A new file, a file system without the call, or a target that vanished
      uses rename(2).
    """
    where = tmp_dfd if tmp_dfd is not None else dfd
    if spare is not None:
        if tmp_dfd is None:  # it would be swapped in from the wrong folder, and its descriptor leak
            raise ValueError("atomic_replace: a spare lives in the temporaries folder; pass tmp_dfd with it")
        tmp, fd = spare
    else:
        tmp = temp_name(rp.name)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=where)
        except OSError as exc:
            raise os_error(exc, rp) from exc
    try:
        _fill_temp(fd, data, mode, None if spare is not None and owner == spare_owner else owner, fsync)
        try:
            if not fsync and _exchange(where, tmp, dfd, rp.name):
                # The old content is now under the temporary's name: the file is replaced already.
                if old_names is not None and where == tmp_dfd:
                    old_names.append(tmp)
                else:
                    remove_temp(where, tmp)
                return os.stat(rp.name, dir_fd=dfd, follow_symlinks=False)
            os.replace(tmp, rp.name, src_dir_fd=where, dst_dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.EXDEV and tmp_dfd is not None:
                os.unlink(tmp, dir_fd=where)
                return atomic_replace(dfd, rp, data, mode, fsync, None, owner)
            raise
        if fsync:
            os.fsync(dfd)
        return os.stat(rp.name, dir_fd=dfd, follow_symlinks=False)
    except BaseException as exc:
        try:
            os.unlink(tmp, dir_fd=where)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise os_error(exc, rp) from exc
        raise


def created_owner(dfd: int) -> tuple[int, int]:
    """The (uid, gid) a file this process creates in the folder `dfd` gets: its effective user, and the
    folder's group when the folder is set-group-ID, else its effective group."""
    st = os.fstat(dfd)
    return os.geteuid(), st.st_gid if st.st_mode & stat.S_ISGID else os.getegid()


def remove_temp(dfd: int, name: str) -> None:
    """Unlink a temporary holding replaced content. A failure leaves only a temporary, which the next open
    of the state folder removes once its writer is gone (`clean_stale_temps`)."""
    try:  # (not contextlib.suppress: this runs once per write, and its context manager costs more than the rest)
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


def _fill_temp(fd: int, data: bytes, mode: int, owner: tuple[int, int] | None, fsync: bool) -> None:
    """Write the temporary's content and mode (and owner), fsync it if asked, close it."""
    try:
        n = os.write(fd, data)  # the whole of it, nearly always: the rest only after a short write
        if n < len(data):
            view = memoryview(data)[n:]
            while view:
                n = os.write(fd, view)
                view = view[n:]
        os.fchmod(fd, mode)
        if owner is not None:
            try:
                os.fchown(fd, owner[0], owner[1])
            except PermissionError:
                pass
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


_RENAME_EXCHANGE = 2
# os.fsencode's encoding of a str, without its Python-level type checks (the names here are always str).
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
_renameat2: Callable[..., int] | None
try:
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
except (AttributeError, OSError):  # a libc without it: rename(2) only
    _renameat2 = None
# The swap is not possible (no such call, a file system without it) or not wanted (no target to swap with).
_NO_EXCHANGE = frozenset({errno.ENOENT, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})


def _exchange(src_dfd: int, src: str, dst_dfd: int, dst: str) -> bool:
    """renameat2(RENAME_EXCHANGE): True when the two names were swapped; False where it is unavailable or
    `dst` does not exist (the caller renames instead); any other failure raises OSError."""
    if _renameat2 is None:
        return False
    if (
        _renameat2(
            src_dfd,
            src.encode(_FS_ENCODING, _FS_ERRORS),
            dst_dfd,
            dst.encode(_FS_ENCODING, _FS_ERRORS),
            _RENAME_EXCHANGE,
        )
        == 0
    ):
        return True
    err = ctypes.get_errno()
    if err in _NO_EXCHANGE:
        return False
    raise OSError(err, os.strerror(err))


def remove_at(dfd: int, rp: ResolvedPath, fsync: bool) -> None:
    try:
        os.unlink(rp.name, dir_fd=dfd)
        if fsync:
            os.fsync(dfd)
    except OSError as exc:
        raise os_error(exc, rp) from exc


def os_error(exc: OSError, rp: ResolvedPath) -> CoordinatorError:
    """Map an OS error to a coded refusal with advice. Nothing has been written when this is raised."""
    e = exc.errno
    where = rp.shown
    if e in (errno.EACCES, errno.EPERM, errno.EROFS):
        what = "the file system is read-only" if e == errno.EROFS else "permission denied"
        return CoordinatorError(
            ErrorCode.PERMISSION_DENIED,
            f"The operating system refused access to {where!r} ({what}); nothing was written. "
            "Check the file's and its folder's permissions, or choose another file.",
            path=rp.key,
        )
    if e in (errno.ENOSPC, errno.EDQUOT):
        return CoordinatorError(
            ErrorCode.IO_ERROR,
            f"The disk is full while writing {where!r}; nothing was written and the file is unchanged. "
            "Free some space, then try again.",
            path=rp.key,
        )
    if e == errno.EISDIR:
        return CoordinatorError(ErrorCode.IS_DIRECTORY, f"{where!r} is a directory, not a file.", path=rp.key)
    if e == errno.ENOENT:
        # The folder was removed (or replaced) between opening it and writing into it: a race with another
        # program, not a fault of the disk.
        return CoordinatorError(
            ErrorCode.FILE_NOT_FOUND,
            f"The folder of {where!r} was removed or replaced while the file was being written; nothing was "
            "written. Check the path, then try again.",
            path=rp.key,
        )
    if e == errno.ENAMETOOLONG:
        return CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{where!r} is too long a path.", path=rp.key)
    if e == errno.ELOOP:
        return CoordinatorError(
            ErrorCode.OUTSIDE_ROOT,
            f"{where!r} became a symlink while it was being opened; nothing was read or written. Try again.",
            path=rp.key,
        )
    return CoordinatorError(
        ErrorCode.IO_ERROR,
        f"Input/output error on {where!r}: {exc.strerror or exc}; nothing was written. Try again.",
        path=rp.key,
    )


def clean_stale_temps(tmp_dir: Path) -> int:
    """Remove temporaries left by processes that died mid-write. Returns how many were removed."""
    removed = 0
    try:
        names = os.listdir(tmp_dir)
    except OSError:
        return 0
    for n in names:
        if ".ec-" not in n or not n.endswith(".tmp"):
            continue
        try:
            pid = int(n.rsplit(".ec-", 1)[1].split("-", 1)[0])
        except (ValueError, IndexError):
            continue
        if pid == os.getpid() or pid_alive(pid):
            continue
        try:
            os.unlink(tmp_dir / n)
            removed += 1
        except OSError:
            pass
    return removed


def pid_alive(pid: int) -> bool:
    """True iff ``pid`` runs. A zombie counts as gone (a daemon's parent is init, which may not reap it),
    but only once every thread of it has exited: a multi-threaded server's main thread can be a zombie
    while its other threads still hold its files open (its sockets are not closed until the last one ends).
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = _task_state(f"/proc/{pid}/stat")
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no /proc here: the signal check is all there is
    if state not in ("Z", "X"):
        return True
    return _threads_running(pid)


def _task_state(stat_path: str) -> str:
    with open(stat_path) as f:
        fields = f.read().rpartition(")")[2].split()
    return fields[0] if fields else "X"


def _threads_running(pid: int) -> bool:
    """Whether a thread of ``pid`` other than an exited one is still listed."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            if _task_state(f"/proc/{pid}/task/{tid}/stat") not in ("Z", "X"):
                return True
        except OSError:
            continue
    return False
