"""The dashboard on a real `edit-coordinator serve`: its JSON routes (viewer token), the page's security
headers, and the page itself in a real headless chromium (Selenium) while a small fleet of sessions edits
through `HttpClient`: it shows the sessions, their edits, the overlap, a file's timeline with a version's
diff and the refusals as they happen, and it shows nothing to a wrong token.

The browser test needs /usr/bin/chromium, /usr/bin/chromedriver and the selenium package (the `test` extra);
without them it is skipped, saying which is missing. With $EDIT_COORDINATOR_SCREENSHOT set it saves a
screenshot of the page there (docs/img/dashboard.png is made so)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coordinator import CoordinatorError
from coordinator.client import HttpClient
from coordinator.server.dashboard import MAX_DIFF_CHARS
from coordinator.state.embedded import stop_embedded_redis
from coordinator.tokens import mint_token
from tests.coordinator.agents.standin import event
from tests.coordinator.server.test_server import SECRET, ServerProcess, auth, token

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLEET = ("fleet-a", "fleet-b", "fleet-c")
EDITS_EACH = 4


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("dashboard") / "repo"
    root.mkdir()
    server = ServerProcess(root, "--max-poll-wait", "2", workers=1)  # the page's open long poll ends soon at stop
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def viewer() -> dict[str, str]:
    return auth(mint_token(SECRET.encode(), viewer=True, ttl_s=3600))


def eventually(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Wait for a background effect (a refusal is counted after its answer has left)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout} s: {what}")
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------------------
# The routes and the page's headers
# ---------------------------------------------------------------------------------------------------------
def test_the_page_runs_only_its_own_inline_script(served: ServerProcess) -> None:
    r = httpx.get(f"{served.url}/dashboard", timeout=30)  # no token: the page holds no data
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    script = re.search(rb"<script>(.*?)</script>", r.content, re.DOTALL)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script.group(1)).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe" not in csp and r.headers["x-frame-options"] == "DENY"
    assert not re.search(rb"(src|href)=\"(https?:)?//", r.content)  # nothing from another origin: works offline
    assert b"innerHTML" not in r.content  # data enters the page as text only


def test_snapshot_shows_sessions_events_leases_and_refusals_by_file(served: ServerProcess) -> None:
    (served.root / "snap.txt").write_text("one\ntwo\n")
    with HttpClient(served.url, token=token("s-snap")) as c:
        c.read("s-snap", "snap.txt")
        c.edit("s-snap", "snap.txt", "one", "ONE")
        c.lease("s-snap", "snap-dir/**", ttl_s=60)
        (served.root / "snap.txt").write_text("changed outside\n")
        with pytest.raises(CoordinatorError):
            c.edit("s-snap", "snap.txt", "ONE", "x")  # stale
    from coordinator.agents import failures

    failures.record(served.root, "codex", "Stop", f"the hook service on {served.root}/x/sock answered 500")
    with httpx.Client(base_url=served.url, timeout=30, headers=viewer()) as http:

        def refused() -> Any:
            snap = http.get("/v1/dashboard").json()
            return snap if any(x["path"] == "snap.txt" for x in snap["refusals"]["by_file"]) else None

        snap = eventually(refused, "the stale edit counted by file")
    assert snap["role"] == "viewer" and snap["health"]["redis"] is True and snap["notes"] == {}
    assert "s-snap" in {s["session"] for s in snap["sessions"]}
    assert ("s-snap", "snap.txt", "edit") in {(e["session"], e["path"], e["operation"]) for e in snap["events"]}
    assert [(x["session"], x["pattern"], x["ticket"]) for x in snap["leases"] if x["session"] == "s-snap"] == [
        ("s-snap", "snap-dir/**", False)
    ]
    assert {"path": "snap.txt", "code": "stale", "count": 1} in snap["refusals"]["by_file"]
    assert snap["refusals"]["recent"][0]["session"] == "s-snap" and snap["refusals"]["by_code_here"]["stale"] >= 1
    assert snap["hook_failures"]["count"] >= 1 and str(served.root) not in json.dumps(snap["hook_failures"])
    assert snap["hook_failures"]["recent"][-1]["what"] == "the hook service on ./x/sock answered 500"


def test_diff_of_a_version(served: ServerProcess) -> None:
    (served.root / "diffed.txt").write_text("alpha\nbeta\ngamma\n")
    with HttpClient(served.url, token=token("s-diff")) as c:
        c.read("s-diff", "diffed.txt")
        c.edit("s-diff", "diffed.txt", "beta", "BETA")
        c.edit("s-diff", "diffed.txt", "gamma", "GAMMA")
    with httpx.Client(base_url=served.url, timeout=30, headers=viewer()) as http:
        first = http.post("/v1/dashboard/diff", json={"path": "diffed.txt", "version": 1}).json()
        newest = http.post("/v1/dashboard/diff", json={"path": "diffed.txt", "version": 2, "context": 0}).json()
        missing = http.post("/v1/dashboard/diff", json={"path": "diffed.txt", "version": 9})
        outside = http.post("/v1/dashboard/diff", json={"path": "../etc/passwd", "version": 1})
    assert "-beta\n+BETA\n" in first["diff"] and " gamma\n" in first["diff"] and first["session"] == "s-diff"
    # the newest version's content is the file itself (not yet in the history): still diffed
    assert newest["diff"].endswith("-gamma\n+GAMMA\n") and " BETA" not in newest["diff"] and not newest["truncated"]
    assert (missing.status_code, missing.json()["code"]) == (404, "file_not_found")
    assert "POST /v1/history" in missing.json()["message"]
    assert outside.status_code == 403 and outside.json()["code"] == "outside_root"
    assert MAX_DIFF_CHARS >= 100_000


def test_dashboard_routes_refuse_session_tokens(served: ServerProcess) -> None:
    r = httpx.get(f"{served.url}/v1/dashboard", headers=auth(token("s-nosy")), timeout=30)
    assert (r.status_code, r.json()["code"]) == (403, "forbidden")
    assert httpx.get(f"{served.url}/v1/dashboard", timeout=30).status_code == 401


# ---------------------------------------------------------------------------------------------------------
# The page in a real browser
# ---------------------------------------------------------------------------------------------------------
def _browser() -> Any:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        pytest.skip(f"the browser test needs {' and '.join(missing)} (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="the browser test needs selenium (test extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    # The driver is named, so Selenium Manager has nothing to look up or download.
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def _fleet(served: ServerProcess, stop: threading.Event, errors: list[BaseException]) -> list[threading.Thread]:
    """Each session edits a file of its own and a shared one, a few times, then waits to be stopped."""
    (served.root / "fleet-shared.txt").write_text("".join(f"{s} 0\n" for s in FLEET))

    def run(session: str) -> None:
        try:
            with HttpClient(served.url, token=token(session), policy="rebase") as c:
                own = f"fleet-{session}.txt"
                c.write(session, own, "n 0\n")
                for n in range(1, EDITS_EACH + 1):
                    c.read(session, own)
                    c.edit(session, own, f"n {n - 1}\n", f"n {n}\n")
                    c.read(session, "fleet-shared.txt")
                    c.edit(session, "fleet-shared.txt", f"{session} {n - 1}\n", f"{session} {n}\n")
                    stop.wait(0.1)  # a pace a person can follow on the page; not an assertion
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    return [threading.Thread(target=run, args=(s,), daemon=True) for s in FLEET]


def _hooked_agent_holds_a_ticket(served: ServerProcess, session: str, file: Path) -> None:
    """Claude Code's hook events for a Read, then the PreToolUse of an Edit (no PostToolUse yet)."""
    file.write_text("return 1\n")
    admin = auth(token(admin=True))
    shown = {"type": "text", "file": {"filePath": str(file), "content": "return 1\n", "numLines": 1,
                                      "startLine": 1, "totalLines": 1}}  # fmt: skip
    for name, extra in (("post_read", {"tool_response": shown}), ("pre_edit", {})):
        data = event(name, session, f"toolu_{name}", file, **extra)
        answer = httpx.post(f"{served.url}/v1/hooks/claude-code", json=data, headers=admin, timeout=30)
        assert answer.status_code == 200 and answer.json() == {}, answer.text  # {}: allowed


@pytest.mark.slow  # 12-18 s on 2 busy cores, most of it chromium's start
def test_page_follows_a_fleet_live_and_refuses_a_wrong_token(served: ServerProcess) -> None:
    driver = _browser()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 30)
    # Found and clicked in one step: the page redraws its tables every second, so a row found first could be
    # replaced before a separate click reached it.
    clicker = "const e = document.querySelector(arguments[0]); if (e) e.click(); return e !== null;"

    def click(css: str) -> None:
        wait.until(lambda d: d.execute_script(clicker, css))

    stop, errors = threading.Event(), []
    try:
        viewer_token = mint_token(SECRET.encode(), viewer=True, ttl_s=3600)
        driver.get(f"{served.url}/dashboard#token={viewer_token}")
        wait.until(ec.visibility_of_element_located((By.ID, "board")))
        # Live as soon as the first snapshot is drawn (its token line), not when the first long poll comes back
        # (up to its 20 s wait with no change: the page said 'not connected' that long).
        shown = 'return [document.getElementById("who").textContent, document.getElementById("live").textContent]'
        who, live = wait.until(lambda d: (got := d.execute_script(shown))[0] and got)
        assert "expires in" in who and live == "live", (who, live)
        assert "token=" not in driver.current_url  # taken out of the address bar
        fleet = _fleet(served, stop, errors)
        for t in fleet:
            t.start()
        for session in FLEET:  # the sessions appear as they edit, without a reload
            wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, f'#sessions tr[data-session="{session}"]')))
        wait.until(ec.text_to_be_present_in_element((By.ID, "overlap"), "fleet-shared.txt"))
        for t in fleet:
            t.join(60)
        assert not errors, errors
        shared_edits = len(FLEET) * EDITS_EACH
        rows = 'document.querySelectorAll("#sessions tr[data-session^=fleet-]")'
        writes_of = f"return [...{rows}].map((r) => r.cells[4].textContent)"
        # Each session's writes: its file's creation and edits, and its edits of the shared file.
        wait.until(lambda d: d.execute_script(writes_of) == [str(1 + 2 * EDITS_EACH)] * len(FLEET))
        # The shared file's timeline: one block per version, and the diff of the newest.
        click('#overlap tr[data-path="fleet-shared.txt"]')
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#timeline button")) == shared_edits)
        wait.until(ec.text_to_be_present_in_element((By.ID, "diff"), "+fleet-"))
        click('#timeline button[data-version="1"]')
        wait.until(ec.text_to_be_present_in_element((By.ID, "diff-head"), "v1 edit"))
        # A refusal shows up by file and code.
        (served.root / "fleet-fleet-a.txt").write_text("changed outside\n")
        with HttpClient(served.url, token=token("fleet-a")) as c, pytest.raises(CoordinatorError):
            c.edit("fleet-a", "fleet-fleet-a.txt", f"n {EDITS_EACH}\n", "x\n")
        wait.until(ec.text_to_be_present_in_element((By.ID, "refusal-files"), "fleet-fleet-a.txt"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "refusal-codes"), "stale"))
        # An agent guarded by its hooks, between its PreToolUse and PostToolUse: its write ticket is shown.
        _hooked_agent_holds_a_ticket(served, "hooked-agent", served.root / "hooked.txt")
        wait.until(ec.text_to_be_present_in_element((By.ID, "leases"), "write ticket"))
        assert "hooked-agent" in driver.find_element(By.ID, "leases").text
        if os.environ.get("EDIT_COORDINATOR_SCREENSHOT"):
            driver.set_window_size(1400, 1250)
            click('#overlap tr[data-path="fleet-shared.txt"]')
            wait.until(ec.text_to_be_present_in_element((By.ID, "diff-head"), f"v{shared_edits} edit"))
            driver.save_screenshot(str(Path(os.environ["EDIT_COORDINATOR_SCREENSHOT"])))

        # A wrong token: the page says so and shows nothing.
        driver.execute_script("sessionStorage.clear()")
        driver.get(f"{served.url}/dashboard#token=ec1.forged.forged")
        wait.until(ec.text_to_be_present_in_element((By.ID, "auth-error"), "The token was refused"))
        assert not driver.find_element(By.ID, "board").is_displayed()
        assert driver.find_elements(By.CSS_SELECTOR, "#sessions tr[data-session]") == []
        assert driver.execute_script("return sessionStorage.length") == 0
        # A session token is not a dashboard token either.
        driver.get(f"{served.url}/dashboard#token={token('fleet-a')}")
        wait.until(ec.text_to_be_present_in_element((By.ID, "auth-error"), "cannot read the dashboard"))
        assert not driver.find_element(By.ID, "board").is_displayed()
    finally:
        stop.set()
        driver.quit()
