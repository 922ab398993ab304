"""The test suite, one folder per package (coordinator/<part>, worker, coordinator_bench, tools) plus project/
for what spans the repository (packaging, examples). Fixtures shared by all live in conftest.py."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
