"""The script `edit-coordinator init` writes into the agents' command hooks (the fast client's entry):

    /abs/python3 -I -S /abs/.../coordinator/cli/hookclient.py AGENT --root ROOT [--timeout S] || exit 2

A script run by path is compiled from its source on every run (a measured part of a hook's start
(BENCHMARKS.md, "Figures behind design choices")); a module
imported is loaded from its cached bytecode. So this script stays a few lines and imports the client
itself (coordinator/cli/fasthook.py, which see) as a top-level module from this folder, without the package
around it; the folder leaves the import path at once, so that nothing else is found there.
"""

import sys

if __name__ == "__main__":
    sys.path.insert(0, __file__.rpartition("/")[0])
    import fasthook  # this folder's, put first just above

    del sys.path[0]
    sys.exit(fasthook.main(sys.argv[1:]))
