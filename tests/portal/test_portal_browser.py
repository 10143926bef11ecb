"""The portal in a real browser (headless Chromium driven by Selenium) against an in-process local cluster.

The jobs are fast fakes (shell loops printing the recipes' progress lines) plus one real, tiny recipe
run, so the chart is checked against the lines paijob's training engine really prints. Set
PAIJOB_PORTAL_SCREENSHOT=path.png to save the job page the README and docs/portal.md show.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any

import pytest
from portal_helpers import (
    EPOCH_LINES,
    MARKUP,
    PROGRESS_COMMANDS,
    SCREENSHOT_ENV,
    STEP_LINES,
    TICKS,
    TOKEN,
    job_yaml,
    portal_link,
)

from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient

pytestmark = pytest.mark.timeout(240)

WAIT = 30  # seconds any one thing may take to show up in the page
RECIPE_EPOCHS, RECIPE_STEPS = 3, 4
RECIPE = (f"python -m paijob.runtime.recipes cifar10 --epochs {RECIPE_EPOCHS} --steps-per-epoch {RECIPE_STEPS} "
          "--eval-steps 1 --synthetic-size 64 --batch-size 8 --log-interval 1 --workers 0 --no-resume")
HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def jobs(server: LocalServer, client: PaiClient) -> dict[str, str]:
    """A finished job with progress lines and markup, a failed one, a running one (and a real recipe run)."""
    ids = {
        "progress": client.submit(job_yaml("progress", PROGRESS_COMMANDS)),
        "failed": client.submit(job_yaml(
            "failed", ["echo 'ImportError: cannot import name shiny' >&2", "exit 1"],
            parameters={"note": MARKUP}, secrets={"password": "hunter2-secret"})),
        "running": client.submit(job_yaml("ticking", [TICKS])),
    }
    if HAS_TORCH:
        ids["recipe"] = client.submit(job_yaml("recipe", [RECIPE]))
    for name in ("progress", "failed"):
        client.wait(ids[name], poll=0.1, timeout=WAIT)
    return ids


def wait_for(driver: Any, condition: Any, what: str, timeout: float = WAIT) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition, message=what)


def css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    found: list[Any] = driver.find_elements(By.CSS_SELECTOR, selector)
    return found


def log_in(driver: Any, server: LocalServer) -> None:
    driver.get(portal_link(server.url))
    wait_for(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-session") == "live",
             "the link logs the browser in")


def open_job(driver: Any, server: LocalServer, job_id: str) -> None:
    driver.get(f"{server.url}/job/{job_id}")
    wait_for(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-job-state"), "the job page")


def rows(driver: Any) -> dict[str, str]:
    """The job list's rows, job id -> state, read at once (the list is redrawn every two seconds)."""
    found: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll('#job-rows tr[data-job]')].map(r => [r.dataset.job, r.dataset.state])")
    return dict((job, state) for job, state in found)


def cells(driver: Any, selector: str) -> list[str]:
    found: list[str] = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(c => c.innerText.trim())", selector)
    return found


def log_text(driver: Any) -> str:
    text: str = driver.execute_script("return document.getElementById('log-text').textContent")
    return text


def chart_points(driver: Any, canvas: str) -> int:
    return int(driver.execute_script(f"return document.getElementById('{canvas}').dataset.points || 0"))


def page_errors(driver: Any) -> list[str]:
    """Script errors and Content-Security-Policy violations the browser logged (not HTTP statuses)."""
    return [entry["message"] for entry in driver.get_log("browser")
            if entry["level"] == "SEVERE" and entry.get("source") != "network"]


def test_the_link_logs_in_and_the_list_shows_finished_and_running_jobs(
        driver: Any, server: LocalServer, client: PaiClient, jobs: dict[str, str]) -> None:
    from selenium.webdriver.support.ui import Select

    log_in(driver, server)
    assert "#code=" not in driver.current_url  # the used code leaves the address bar
    assert TOKEN not in driver.page_source
    wait_for(driver, lambda d: rows(d).get(jobs["running"]) == "RUNNING" and rows(d).get(jobs["progress"]) == "SUCCEEDED",
             "a running and a finished job in the list")
    assert rows(driver)[jobs["failed"]] == "FAILED"
    driver.refresh()  # a reload without the code stays logged in
    wait_for(driver, lambda d: jobs["progress"] in rows(d), "the list after a reload")
    late = client.submit(job_yaml("late", ["true"]))
    wait_for(driver, lambda d: rows(d).get(late) == "SUCCEEDED", "a job submitted later, without a reload")
    css(driver, "#keyword")[0].send_keys("prog")
    wait_for(driver, lambda d: list(rows(d)) == [jobs["progress"]], "the keyword filter")
    css(driver, "#keyword")[0].clear()
    state = Select(css(driver, "#state-filter")[0])
    state.select_by_value("RUNNING")
    wait_for(driver, lambda d: jobs["running"] in rows(d) and set(rows(d).values()) == {"RUNNING"}, "the state filter")
    state.select_by_value("")
    css(driver, "#job-table th[data-key=name]")[0].click()
    wait_for(driver, lambda d: len(rows(d)) >= 4, "every job again")
    names = [r.split("~", 1)[1] for r in rows(driver)]
    assert names == sorted(names) and len(names) >= 4
    assert page_errors(driver) == []


def test_a_browser_without_the_link_sees_no_job(driver: Any, server: LocalServer, jobs: dict[str, str]) -> None:
    log_in(driver, server)
    driver.delete_all_cookies()
    driver.get(server.url + "/")
    wait_for(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-session") == "none",
             "the logged-out notice")
    assert css(driver, "#job-rows tr") == [] or not css(driver, "#jobs")[0].is_displayed()
    assert "paijob local open" in css(driver, "#notice")[0].text
    assert "progress" not in driver.page_source and "ticking" not in driver.page_source
    used = portal_link(server.url)
    driver.get(used)
    wait_for(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-session") == "live", "login")
    driver.delete_all_cookies()
    driver.get(used)  # the same link again: its code is used up
    wait_for(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-session") == "none",
             "a used link logs nobody in")
    assert "used already or expired" in css(driver, "#notice")[0].text


def test_the_job_page_shows_tasks_exit_meaning_root_cause_and_masked_config(
        driver: Any, server: LocalServer, client: PaiClient, jobs: dict[str, str]) -> None:
    log_in(driver, server)
    open_job(driver, server, jobs["failed"])
    task = client.get_job(jobs["failed"])["taskRoles"]["trainer"]["taskStatuses"][0]
    wait_for(driver, lambda d: css(d, "#task-rows tr[data-task='trainer/0']"), "the task row")
    row = cells(driver, "#task-rows tr[data-task='trainer/0'] td")
    assert row[2] == "FAILED"
    assert row[3] == str(task["containerExitCode"]) and task["containerExitCode"] != 0
    assert row[4].startswith(task["containerExitSpec"]["phrase"])
    assert row[5] == task["containerExitDiagnostics"]
    cause = css(driver, "#cause")[0]
    assert cause.is_displayed() and str(task["containerExitCode"]) in cause.text
    assert css(driver, "#stop")[0].is_displayed() is False  # an ended job has no stop button
    assert cells(driver, "#attempt-rows tr td:first-child") == ["0"]
    config = log_config = driver.execute_script("return document.getElementById('config-text').textContent")
    assert MARKUP in config  # a parameter holding markup, shown as text
    assert "hunter2-secret" not in driver.page_source and "******" in log_config
    assert css(driver, "#config-text img") == []
    assert page_errors(driver) == []


def test_the_job_page_shows_the_slow_rank_doctors_verdict_and_each_ranks_figures(
        driver: Any, server: LocalServer, jobs: dict[str, str]) -> None:
    from paijob.common import records
    from paijob.common.records import SlowRecord
    from paijob.local.processes import SLOW_NAME

    figure = {"rank": 1, "node_rank": 0, "host": "127.0.0.1", "local_rank": 1, "wait_share": 0.04, "last": 12,
              "activity": {"data": 0.61, "compute": 0.2}}
    line = "slow rank: rank 1 (node rank 0, host 127.0.0.1, local rank 1) holds the job back"
    folder = server.cluster.work_dir(jobs["progress"], 0, "trainer", 0)
    folder.mkdir(parents=True, exist_ok=True)
    figures = (figure, dict(figure, rank=0, local_rank=0, cpu_wait=0.78))
    key = server.cluster.record_key(jobs["progress"], 0, "trainer", 0)  # what the task's runtime signs with
    record = SlowRecord("rank", line, (1,), figures, final=True, time=1.0)
    (folder / SLOW_NAME).write_text(records.signed_text(record.as_json(), key))
    log_in(driver, server)
    open_job(driver, server, jobs["progress"])
    wait_for(driver, lambda d: "Slow rank" in css(d, "#cause-list")[0].text, "the slow-rank verdict")
    text = css(driver, "#cause-list")[0].text
    assert f"{line} (over the run)" in text
    assert "rank 1 (node rank 0, 127.0.0.1): waits 4% of the time, arrived last 12 times; data 61%, compute 20%\n" in text
    assert "rank 0 (node rank 0, 127.0.0.1): waits 4% of the time, arrived last 12 times; data 61%, compute 20%; " \
        "waits for a CPU 78%" in text
    assert page_errors(driver) == []


def _doctors_records_for(server: LocalServer, job_id: str, *, final: bool) -> str:
    """A slow-rank verdict and a stall record written where the local cluster reads a job's (node 0's task
    folder), signed as its paijob-runtime signs them; the slow line."""
    import time

    from paijob.common import records
    from paijob.common.records import SlowRecord, StallRecord
    from paijob.local.processes import SLOW_NAME, STALL_NAME

    line = "slow rank: rank 1 (node rank 0, host 127.0.0.1, local rank 1) holds the job back"
    folder = server.cluster.work_dir(job_id, 0, "trainer", 0)
    folder.mkdir(parents=True, exist_ok=True)
    key = server.cluster.record_key(job_id, 0, "trainer", 0)
    record = SlowRecord("rank", line, (1,), (), final=final, time=time.time())
    (folder / SLOW_NAME).write_text(records.signed_text(record.as_json(), key))
    (folder / STALL_NAME).write_text(records.signed_text(StallRecord((1,), 95, time.time()).as_json(), key))
    return line


def test_a_running_job_s_slow_rank_is_its_progress_and_the_list_marks_it(
        driver: Any, server: LocalServer, jobs: dict[str, str]) -> None:
    """Issue 54 item 6: a running job's slow-rank verdict sat under "Why it ended"; the list had no marker."""
    line = _doctors_records_for(server, jobs["running"], final=False)
    log_in(driver, server)
    wait_for(driver, lambda d: css(d, f"#job-rows tr[data-job='{jobs['running']}'] [data-marker=slow]"),
             "the slow-rank marker in the list")
    marker = css(driver, f"#job-rows tr[data-job='{jobs['running']}'] [data-marker=slow]")[0]
    assert marker.text == "slow rank" and marker.get_attribute("title") == line
    stalled = css(driver, f"#job-rows tr[data-job='{jobs['running']}'] [data-marker=stalled]")[0]
    assert stalled.text == "stalled" and stalled.get_attribute("title") == "no progress for 1 min 35 s on rank 1"
    from paijob.local.processes import STALL_NAME

    (server.cluster.work_dir(jobs["running"], 0, "trainer", 0) / STALL_NAME).unlink()  # slow, no longer stalled
    assert css(driver, f"#job-rows tr[data-job='{jobs['progress']}'] [data-marker]") == []  # not running
    open_job(driver, server, jobs["running"])
    wait_for(driver, lambda d: "Slow rank" in css(d, "#cause-list")[0].text, "the slow-rank verdict")
    assert css(driver, "#cause h2")[0].text == "Progress"
    assert "bad" not in (css(driver, "#cause")[0].get_attribute("class") or "")
    assert page_errors(driver) == []


def test_the_job_header_keeps_each_value_under_its_label_at_any_width(
        driver: Any, server: LocalServer, jobs: dict[str, str]) -> None:
    """Issue 54 item 6: at 1400 px the header's grid had 7 columns, and labels and values, separate cells,
    shifted: a value stood under the next label. Each label and its value now share one cell."""
    log_in(driver, server)
    open_job(driver, server, jobs["progress"])
    wait_for(driver, lambda d: len(css(d, "#job-meta dd")) >= 9, "the job header")
    before = driver.get_window_size()
    try:
        for width in (1400, 1180, 900, 520):
            driver.set_window_size(width, 900)
            places = driver.execute_script("""
                return [...document.querySelectorAll('#job-meta dt')].map(dt => {
                  const dd = dt.nextElementSibling, a = dt.getBoundingClientRect(), b = dd.getBoundingClientRect();
                  return [dt.textContent, dd.tagName, Math.round(a.left), Math.round(b.left), a.bottom <= b.top + 1];
                })""")
            assert len(places) == 9, places
            for label, tag, label_x, value_x, below in places:
                assert tag == "DD" and label_x == value_x and below, (width, label, places)
    finally:
        driver.set_window_size(before["width"], before["height"])
    assert page_errors(driver) == []


def test_a_log_line_holding_markup_stays_text(driver: Any, server: LocalServer, jobs: dict[str, str]) -> None:
    log_in(driver, server)
    open_job(driver, server, jobs["progress"])
    wait_for(driver, lambda d: MARKUP in log_text(d), "the log line with markup")
    assert css(driver, "img") == []  # nothing in the page became an element
    assert driver.execute_script("return document.querySelectorAll('[onerror]').length") == 0
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018  (the onerror never ran)


def test_the_progress_chart_is_drawn_from_the_progress_lines(
        driver: Any, server: LocalServer, jobs: dict[str, str]) -> None:
    log_in(driver, server)
    open_job(driver, server, jobs["progress"])
    wait_for(driver, lambda d: chart_points(d, "loss-chart") == STEP_LINES + EPOCH_LINES, "the loss chart")
    assert chart_points(driver, "rate-chart") == STEP_LINES  # images/s per step
    pixels = driver.execute_script("""
        const c = document.getElementById('loss-chart');
        const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let blue = 0;
        for (let i = 0; i < data.length; i += 4) if (data[i + 2] > 120 && data[i] < 80) blue++;
        return blue;""")
    assert pixels > 100  # the train-loss line is on the canvas, not only counted


@pytest.mark.skipif(not HAS_TORCH, reason="the recipe run needs torch (pip install -e '.[train]')")
def test_the_chart_reads_a_real_recipe_run(driver: Any, server: LocalServer, client: PaiClient,
                                           jobs: dict[str, str]) -> None:
    state = client.wait(jobs["recipe"], poll=0.2, timeout=180)["jobStatus"]["state"]
    assert state == "SUCCEEDED"
    log_in(driver, server)
    open_job(driver, server, jobs["recipe"])
    steps = RECIPE_EPOCHS * RECIPE_STEPS
    try:
        wait_for(driver, lambda d: chart_points(d, "loss-chart") == steps + RECIPE_EPOCHS, "the recipe's loss chart")
    except Exception as error:  # say what the page had, so that a failure can be explained
        lines = [line for line in log_text(driver).splitlines() if " epoch " in line]
        raise AssertionError(f"loss chart: {chart_points(driver, 'loss-chart')} points, "
                             f"not {steps + RECIPE_EPOCHS}; the page's progress lines:\n" + "\n".join(lines)
                             + "\nbrowser errors: " + repr(page_errors(driver))) from error
    assert chart_points(driver, "rate-chart") == steps
    wait_for(driver, lambda d: "paijob: summary" in log_text(d), "the recipe's log")
    parsed = driver.execute_script(
        "return document.getElementById('log-text').textContent.split('\\n').map(parseProgressLine).filter(Boolean)")
    assert [p["kind"] for p in parsed].count("step") == steps
    assert [p["x"] for p in parsed if p["kind"] == "epoch"] == list(range(1, RECIPE_EPOCHS + 1))
    assert all(p["loss"] > 0 and p["rate"] > 0 for p in parsed)
    target = os.environ.get(SCREENSHOT_ENV)
    if target:
        driver.set_window_size(1200, 1100)
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(target)


def test_the_log_follows_a_running_task(driver: Any, server: LocalServer, jobs: dict[str, str]) -> None:
    log_in(driver, server)
    open_job(driver, server, jobs["running"])

    def last_tick(d: Any) -> int:
        ticks = re.findall(r"^tick (\d+)$", log_text(d), re.MULTILINE)
        return int(ticks[-1]) if ticks else 0

    wait_for(driver, last_tick, "the running task's log")
    seen = last_tick(driver)
    wait_for(driver, lambda d: last_tick(d) >= seen + 3, "new lines while the page stays open")
    css(driver, "input[name=stream][value=stdout]")[0].click()
    wait_for(driver, lambda d: "tick" in log_text(d), "the stdout stream")
    assert "[paijob local]" not in log_text(driver)  # the cluster's notes are on stderr
    assert "following" in css(driver, "#log-status")[0].text


def test_the_stop_button_stops_a_running_job(driver: Any, server: LocalServer, client: PaiClient) -> None:
    job_id = client.submit(job_yaml("stoppable", [TICKS]))
    log_in(driver, server)
    open_job(driver, server, job_id)
    wait_for(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-job-state") == "RUNNING",
             "the job running")
    css(driver, "#stop")[0].click()
    wait_for(driver, lambda d: d.switch_to.alert, "the confirm dialog").dismiss()  # "cancel" keeps it running
    assert client.get_job(job_id)["jobStatus"]["executionType"] == "START"
    css(driver, "#stop")[0].click()
    wait_for(driver, lambda d: d.switch_to.alert, "the confirm dialog").accept()
    wait_for(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-job-state") == "STOPPED",
             "STOPPED on the page")
    assert css(driver, "#job-state")[0].text == "STOPPED"
    assert client.get_job(job_id)["jobStatus"]["state"] == "STOPPED"
    assert not css(driver, "#stop")[0].is_displayed()
    assert page_errors(driver) == []
