"""Helpers shared by the portal tests: jobs, the browser, logging a browser in."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import requests
import yaml

from paijob.local.portal.sessions import CODE_PATH, login_url

TOKEN = "portal-sentinel-token-7c41e0"  # the cluster's long-lived token: must never reach a browser
MARKUP = "<img src=x onerror=alert(1)>"  # a log line and a config value holding markup: must stay text
SCREENSHOT_ENV = "PAIJOB_PORTAL_SCREENSHOT"  # a path: the browser test saves the job page there (docs/portal-job-page.png)

# The progress lines of paijob's recipes (paijob/runtime/recipes/loglines.py) as they reach a task log,
# printed by a shell loop so that the test job takes a second, not a training run.
PROGRESS_COMMANDS = [
    "for e in 1 2; do for s in 1 2 3 4; do "
    "echo \"[rank0]: paijob: epoch $e/2 step $s/4 loss 2.$((9 - 2 * e - s))00 lr 0.02 $((100 * e + 10 * s)).5 img/s\"; "
    "done; "
    "echo \"[rank0]: paijob: epoch $e/2 train loss 1.$((9 - e)) top1 40.00% | eval loss 1.$((8 - e)) top1 45.00% "
    "| $((100 * e)).0 img/s\" >&2; done",
    f"echo '{MARKUP}'",
]
STEP_LINES = 8
EPOCH_LINES = 2
TICKS = 'i=0; while true; do i=$((i + 1)); echo "tick $i"; sleep 0.2; done'


def job_yaml(name: str, commands: list[str], **extra: Any) -> str:
    """A small valid protocol-v2 job running plain bash commands."""
    job: dict[str, Any] = {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [{"type": "dockerimage", "name": "img", "uri": "python:3.11"}],
        "taskRoles": {"trainer": {
            "instances": 1,
            "dockerImage": "img",
            "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0},
            "commands": commands,
        }},
        **extra,
    }
    return yaml.safe_dump(job, sort_keys=False)


def find_browser() -> tuple[str, str] | str:
    """(chromium, chromedriver) when both are installed, else what is missing, as a skip reason."""
    browser = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = shutil.which("chromedriver")
    if browser and driver:
        return browser, driver
    missing = " and ".join(name for name, found in (("Chromium", browser), ("chromedriver", driver)) if not found)
    return f"no {missing} here (Debian: apt-get install chromium chromium-driver)"


def new_browser(browser: str, driver: str, profile: Path) -> Any:
    """A headless Chromium that reaches nothing but 127.0.0.1."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-extensions", "--no-proxy-server",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--window-size=1280,1500",
                "--force-device-scale-factor=1", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=driver, log_output=os.devnull)
    return webdriver.Chrome(service=service, options=options)


def new_code(url: str) -> str:
    """A one-time code from the server at ``url``, asked for with the token as `paijob local open` does."""
    reply = requests.post(url + CODE_PATH, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    reply.raise_for_status()
    code: str = reply.json()["code"]
    return code


def portal_link(url: str) -> str:
    """What `paijob local open` prints for the server at ``url``."""
    return login_url(url, new_code(url))
