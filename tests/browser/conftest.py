"""The browser page (``/``) driven by a real headless Chromium (Debian's ``/usr/bin/chromium``, through Playwright
for Python; Playwright downloads no browser of its own) against a real gateway.

Two gateways: ``gateway`` is the app in a uvicorn thread with an API key and no Redis (the Methods and Configs
views call compute routes only); ``stack`` is ``posenc serve`` in a subprocess, the command ``make run`` runs
(private redis-server, a supervised Celery worker, uvicorn), for the Jobs view. Both require the key, so every
test also checks that the page sends the key it was given.

Skipped, with the reason, only when Chromium or the playwright package is absent; CI (.ci/run) installs both.
Screenshots go to each test's tmp dir (their paths printed), with a copy in ``$POSENC_ARTIFACTS/browser`` (default:
``<tmp>/posenc-browser-artifacts``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from posenc import runtime
from posenc.settings import Settings
from tests.helpers.threads import app_in_thread

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("POSENC_CHROMIUM", "/usr/bin/chromium"))
API_KEY = "browser-test-key"

try:
    from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright
except ImportError:  # pragma: no cover - the skip below says so
    sync_playwright = None


def _missing() -> str | None:
    if sync_playwright is None:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"Chromium is not installed at {CHROMIUM} (apt-get install chromium; or set POSENC_CHROMIUM)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Module-scoped: Playwright's sync API runs an event loop in this thread while it is open, which would break
    asyncio.run() in whatever test file this process runs next."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    with sync_playwright() as playwright:  # type: ignore[misc]
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where the screenshots go; printed so a CI log says where to find them."""
    root = Path(os.environ.get("POSENC_ARTIFACTS") or Path(tempfile.gettempdir()) / "posenc-browser-artifacts")
    directory = root / "browser"
    directory.mkdir(parents=True, exist_ok=True)
    print(f"\nbrowser test screenshots: {directory}")
    return directory


@dataclass
class Session:
    """A page with every console message and page error it produced, and a screenshot helper."""

    page: Page
    url: str
    directory: Path  # the test's own tmp dir
    copies: Path  # the session's screenshot folder, where a copy of each goes
    errors: list[str] = field(default_factory=list)

    def open(self, view: str) -> None:
        """A first visit: the page asks for the key (its one request so far refused with 401, which Chromium
        logs), the key is entered and the page loads; only errors after that count."""
        self.page.goto(f"{self.url}/#{view}")
        status = self.page.locator("#status")
        status.filter(has_text="needs an API key").wait_for()
        assert all("401" in error for error in self.errors), self.errors
        self.errors.clear()
        self.page.get_by_label("API key").fill(API_KEY)
        self.page.get_by_role("button", name="Use key").click()
        self.page.wait_for_function("document.querySelector('#status').textContent === 'Ready.'")
        assert self.page.evaluate("localStorage.getItem('posenc.apiKey')") == API_KEY

    def screenshot(self, name: str) -> Path:
        """A full-page screenshot in the test's tmp dir (its path printed), copied to the session's folder."""
        path = self.directory / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        shutil.copyfile(path, self.copies / path.name)
        print(f"screenshot: {path}")
        return path

    def assert_no_errors(self) -> None:
        assert not self.errors, "console errors:\n" + "\n".join(self.errors)


@pytest.fixture
def session(browser: Browser, artifacts: Path, tmp_path: Path) -> Callable[..., Session]:
    contexts = []

    def open_session(url: str, width: int = 1280, height: int = 900) -> Session:
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        opened = Session(page, url, tmp_path, artifacts)

        def on_console(message: ConsoleMessage) -> None:
            if message.type == "error":
                opened.errors.append(f"console: {message.text} ({message.location})")

        page.on("console", on_console)
        page.on("pageerror", lambda error: opened.errors.append(f"page error: {error}"))
        return opened

    yield open_session  # type: ignore[misc]
    for context in contexts:
        context.close()


# ------------------------------------------------------------------------------------------------ gateways
@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real app in a uvicorn thread, keys required, no Redis (no jobs)."""
    settings = Settings(
        redis_url=None, api_keys=[API_KEY], rate_limit_per_minute=None, cors_origins=[], data_dir=None, data_dirs=[],
        state_dir=tmp_path_factory.mktemp("state"),
    )  # fmt: skip
    with app_in_thread(settings) as url:
        yield url


@dataclass
class Stack:
    url: str
    log: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"X-API-Key": API_KEY}, timeout=30)

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """``posenc serve`` (what ``make run`` runs) on a free port, in a state directory of its own; ready once
    /readyz says Redis and a worker answer."""
    if _missing():
        pytest.skip(_missing() or "")
    port = runtime.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env.update(
        {
            "POSENC_API_KEYS": json.dumps([API_KEY]),
            "POSENC_DEVICE": "cpu",
            "POSENC_TORCH_THREADS": "1",
            "POSENC_JOB_PROGRESS_INTERVAL_S": "0.1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    posenc = shutil.which("posenc", path=str(Path(sys.executable).parent)) or "posenc"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [posenc, "serve", "--port", str(port), "--state-dir", str(tmp_path / "state")],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = Stack(f"http://127.0.0.1:{port}", log)

    def ready() -> bool:
        if process.poll() is not None:
            return True
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{running.url}/readyz", headers={"X-API-Key": API_KEY}, timeout=2).status_code == 200
        return False

    try:
        assert runtime.wait_until(ready, timeout=90, interval=0.25), f"posenc serve not ready:\n{running.tail()}"
        assert process.poll() is None, f"posenc serve exited:\n{running.tail()}"
        yield running
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
