"""Is a folder on a network filesystem? The embedded Redis server refuses to start for a state folder on one.

One host owns a repository's files and runs its engines (library processes and/or ``edit-coordinator
serve``); agents on other hosts reach it over HTTP or through ``edit-coordinator mcp --server URL``. Several
hosts sharing one checkout over NFS, SMB/CIFS or a FUSE network filesystem (sshfs, ...) is not supported (OS
file locks there are leases in disguise, and each host would start its own server), so
`check_local_filesystem` refuses it; ``EDIT_COORDINATOR_ALLOW_NETWORK_FS=1`` overrides that for a network
mount used by one host only. The type is that of the longest mount point in /proc/mounts that contains the
folder; where it cannot be told, the folder counts as local.
"""

from __future__ import annotations

import os
from pathlib import Path

from coordinator.errors import CoordinatorError, ErrorCode

__all__ = [
    "ALLOW_NETWORK_FS_ENV",
    "NETWORK_FS_TYPES",
    "NETWORK_FUSE",
    "check_local_filesystem",
    "filesystem_type",
    "is_network_filesystem",
]

#: Filesystem types (as /proc/mounts names them) that are shared between hosts.
NETWORK_FS_TYPES = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "ceph", "glusterfs", "lustre", "gpfs", "9p"}
    | {"davfs", "coda", "ocfs2", "gfs2", "beegfs", "orangefs", "pvfs2", "virtiofs"}
)
#: FUSE filesystems that reach other hosts (`fuse.<name>` in /proc/mounts).
NETWORK_FUSE = frozenset(
    {"sshfs", "s3fs", "rclone", "gcsfuse", "glusterfs", "cephfs", "juicefs", "davfs2", "goofys", "mfs", "lizardfs"}
)
ALLOW_NETWORK_FS_ENV = "EDIT_COORDINATOR_ALLOW_NETWORK_FS"


def filesystem_type(path: Path, mounts: str | None = None) -> str | None:
    """The type of the filesystem holding ``path`` (symlinks resolved as far as it exists), from the longest
    mount point that contains it in /proc/mounts (or ``mounts``, text in that format); None where that
    cannot be told."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    target = os.path.realpath(path)
    best, best_type = "", None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = fields[1].replace("\\040", " ").replace("\\011", "\t")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, fields[2]
    return best_type


def is_network_filesystem(fs_type: str | None) -> bool:
    if fs_type is None:
        return False
    if fs_type.startswith("fuse."):
        return fs_type[len("fuse.") :] in NETWORK_FUSE
    return fs_type in NETWORK_FS_TYPES


def check_local_filesystem(state_dir: Path, mounts: str | None = None) -> None:
    """Refuse (state_unavailable) a state folder on a network filesystem; see the module docstring."""
    if os.environ.get(ALLOW_NETWORK_FS_ENV, "") == "1":
        return
    fs_type = filesystem_type(state_dir, mounts)
    if not is_network_filesystem(fs_type):
        return
    raise CoordinatorError(
        ErrorCode.STATE_UNAVAILABLE,
        f"The state folder {state_dir} is on a network filesystem ({fs_type}), so the embedded Redis server "
        "was not started: several hosts writing one checkout over a shared filesystem is not a supported "
        "topology (file locks there are not reliable, and each host would keep its own state). Run the "
        "coordinator on the one host that owns the files (library processes and/or `edit-coordinator "
        "serve`), and let agents on other hosts reach it over HTTP or with `edit-coordinator mcp --server "
        f"URL --token T`. If only this host ever uses the checkout, set {ALLOW_NETWORK_FS_ENV}=1.",
        path=str(state_dir),
        filesystem=fs_type,
    )
