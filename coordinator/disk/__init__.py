"""The local file system: confined paths, safe opens, atomic replace, locks, write-ticket marks, the state
folder's layout, spare files, network-filesystem detection. Beside text/ at the bottom: no Redis, no engine."""
