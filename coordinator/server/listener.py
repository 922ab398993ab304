"""The service's unix-socket listener (`edit-coordinator serve --uds PATH`): made safely, removed on shutdown.

Rules, each enforced in `bind_unix` / `UnixListener.remove`:
- The path fits a socket address (at most 107 bytes, `coordinator.endpoint.check_socket_path`) and its folder
  exists; anything else is `invalid_argument` before anything is made.
- The socket is created with mode 0600 (bound under umask 077, then chmod'ed to be sure): only the user who
  runs the service may connect. Tokens are still needed on it: one user's agents are still many sessions.
- A file already at the path is replaced only when it is a socket nobody listens on (a dead `serve` left it:
  connecting is refused). A socket that answers is a live service: refused, and left alone. Anything that is not
  a socket (a regular file, a folder, a symlink) is refused and never touched.
- The check and the replacement run under an exclusive flock on the socket's folder, so two services starting
  at once on one path cannot both decide the old socket is stale: the second finds the first's socket live.
- On shutdown, once this service's listening socket is closed in every process, the file is removed only if
  it is still a socket nobody listens on (checked under the folder's lock): a live socket some later service
  put there is left alone. (Not by inode: the file system hands a freed inode number to the next file at
  once, so a replacement can carry the same device and inode.)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from coordinator.endpoint import check_socket_path
from coordinator.errors import CoordinatorError, ErrorCode

_PROBE_TIMEOUT_S = 1.0

__all__ = ["UnixListener", "bind_unix"]


@dataclass
class UnixListener:
    """A listening unix socket and the file it was bound at."""

    sock: socket.socket
    path: str

    def remove(self) -> bool:
        """After the socket is closed (here and in every worker): remove its file unless it is not a socket or
        something listens there again; whether it was removed."""
        self.sock.close()
        with contextlib.suppress(OSError, CoordinatorError), _folder_locked(os.path.dirname(self.path)):
            if stat.S_ISSOCK(os.lstat(self.path).st_mode) and not _answers(self.path):
                os.unlink(self.path)
                return True
        return False


def bind_unix(path: str, backlog: int) -> UnixListener:
    """A socket listening at `path` (see the module docstring); `invalid_argument` when it cannot be."""
    path = os.path.abspath(path)
    check_socket_path(path, "--uds")
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise _refusal(f"--uds {path!r}: the folder {folder!r} does not exist; create it (mode 0700) first.")
    try:
        with _folder_locked(folder):
            _clear_stale(path)
            return _listen(path, backlog)
    except OSError as exc:
        raise _refusal(f"Cannot listen on the unix socket {path!r}: {exc.strerror or exc}.") from None


@contextlib.contextmanager
def _folder_locked(folder: str) -> Iterator[None]:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _clear_stale(path: str) -> None:
    """Remove a dead service's socket at `path`; refuse anything else that is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "a file"
        raise _refusal(
            f"--uds {path!r}: {kind} that is not a socket is already there; it was left alone. Choose another "
            "path, or remove it yourself if it is not needed."
        )
    if _answers(path):
        raise _refusal(
            f"--uds {path!r}: a service is already listening on that socket (it was left alone). Stop that service "
            "first (SIGTERM to its `edit-coordinator serve`, or POST /v1/admin/shutdown), or choose another path."
        )
    os.unlink(path)  # nobody listens: a socket left behind by a service that died


def _answers(path: str) -> bool:
    """Whether something listens on the socket at `path` (a connection is accepted or queued)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_PROBE_TIMEOUT_S)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        return False
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.EAGAIN:  # its backlog is full: busy, so alive
            return True
        raise _refusal(
            f"--uds {path!r}: cannot tell whether the socket already there is in use ({exc.strerror or exc}); it "
            "was left alone. Choose another path."
        ) from None
    finally:
        probe.close()
    return True


def _listen(path: str, backlog: int) -> UnixListener:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # the socket file is born 0600: no moment where others may connect
    try:
        sock.bind(path)
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(old_umask)
    try:
        os.chmod(path, 0o600)
        sock.listen(backlog)  # connections queue from now on, before the workers are up
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return UnixListener(sock, path)


def _refusal(message: str) -> CoordinatorError:
    return CoordinatorError(ErrorCode.INVALID_ARGUMENT, message)
