"""Packaging: the declared minimums are derived mechanically and are real constraints; py.typed ships.

The install of those minimums, and the test suite run against them, is .ci/run's second venv (it needs
the network and minutes); here: the derivation itself, on pyproject.toml and on made-up ones.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from tests import REPO_ROOT

ROOT = REPO_ROOT
sys.path.insert(0, str(ROOT / "scripts"))

import min_constraints as mc  # noqa: E402


def _project(deps: list[str], **extras: list[str]) -> dict:
    return {"project": {"name": "edit-coordinator", "dependencies": deps, "optional-dependencies": extras}}


def test_lower_bounds_become_exact_pins_with_their_markers() -> None:
    assert mc.lower_bound("redis[hiredis]>=6.0.0") == "redis==6.0.0"
    assert mc.lower_bound("mcp>=2.3.0,<3") == "mcp==2.3.0"
    assert mc.lower_bound("Typing_Extensions ~= 4.12") == "typing-extensions==4.12"
    assert mc.lower_bound('uvloop>=0.19; sys_platform != "win32"') == 'uvloop==0.19; sys_platform != "win32"'


@pytest.mark.parametrize("req", ["rich", "rich<14", "rich>13.7", "rich>=13,>=14"])
def test_a_requirement_without_one_lower_bound_is_refused(req: str) -> None:
    with pytest.raises(mc.NoLowerBound, match="lower bound"):
        mc.lower_bound(req)


def test_self_referencing_extras_bring_in_their_requirements_once() -> None:
    proj = _project(["a>=1"], bench=["m>=3"], test=["edit-coordinator[bench]", "p>=9", "a>=1"])
    assert mc.constraints(proj, ["test"]) == ["a==1", "p==9", "m==3"]
    assert mc.constraints(proj, []) == ["a==1"]
    with pytest.raises(mc.NoLowerBound, match="no extra 'docs'"):
        mc.constraints(proj, ["docs"])


def test_every_requirement_of_pyproject_is_pinned_at_its_minimum() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts/min_constraints.py"), "--extra", "test", "--extra", "lint"],
        capture_output=True,
        text=True,
        check=True,
    )
    pins = {line.split("==")[0] for line in p.stdout.splitlines() if not line.startswith("#")}
    listed = project["dependencies"] + [
        r for extra in ("bench", "test", "lint") for r in project["optional-dependencies"][extra]
    ]
    names = {mc._normal(mc._REQUIREMENT.match(r).group("name")) for r in listed}  # type: ignore[union-attr]
    assert names - {"edit-coordinator"} == pins
    assert "matplotlib" not in {mc._normal(r.split(">")[0]) for r in project["dependencies"]}  # plots: [bench]


def test_both_packages_ship_py_typed() -> None:
    for pkg in ("coordinator", "worker"):
        assert (ROOT / pkg / "py.typed").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["*"]


def test_the_dashboard_page_is_package_data() -> None:
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    server = ROOT / "coordinator" / "server"
    shipped = {p for glob in package_data["coordinator.server"] for p in server.glob(glob)}
    assert server / "pages" / "dashboard.html" in shipped
