"""The portal's login and its session cookie on the REST API: what a browser may and may not do with it.

Requests go to a real server on 127.0.0.1 with ``requests`` (no browser): a cookie sent by hand,
headers set as a browser would set them for a same-origin page or for another site.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from portal_helpers import TOKEN, job_yaml, new_code

from paijob.local.portal import sessions as portal_sessions
from paijob.local.portal.sessions import CODE_PATH, CSRF_HEADER, SESSION_PATH, Sessions
from paijob.local.portal.web import CSP
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient

API = "/rest-server/api/v2"


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[LocalServer]:
    """A server of its own, for tests that use up or end sessions."""
    srv = LocalServer(tmp_path / "state", TOKEN).start()
    try:
        yield srv
    finally:
        srv.stop()


def cookie_name(server: LocalServer) -> str:
    return f"paijob_portal_{server.port}"


def log_in(server: LocalServer) -> requests.Session:
    """A session that logged in as the portal page does (same-origin fetch with the code)."""
    browser = requests.Session()
    browser.trust_env = False
    reply = browser.post(server.url + SESSION_PATH, json={"code": new_code(server.url)},
                         headers={"Origin": server.url, "Sec-Fetch-Site": "same-origin", CSRF_HEADER: "1"})
    assert reply.status_code == 200, reply.text
    return browser


def stop_request(server: LocalServer, browser: requests.Session, job_id: str, **headers: str) -> requests.Response:
    return browser.put(f"{server.url}{API}/jobs/{job_id}/executionType", json={"value": "STOP"}, headers=headers)


def test_a_code_needs_the_bearer_token(server: LocalServer) -> None:
    assert requests.post(server.url + CODE_PATH, timeout=10).status_code == 401
    wrong = requests.post(server.url + CODE_PATH, headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401
    reply = requests.post(server.url + CODE_PATH, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert reply.status_code == 200
    assert reply.json()["expiresIn"] == portal_sessions.CODE_TTL
    assert TOKEN not in reply.text


def test_the_session_cookie_is_httponly_samesite_strict_and_not_the_token(server: LocalServer) -> None:
    browser = log_in(server)
    (cookie,) = [c for c in browser.cookies if c.name == cookie_name(server)]
    assert cookie.value != TOKEN and TOKEN not in cookie.value
    assert cookie.has_nonstandard_attr("HttpOnly")
    assert cookie.get_nonstandard_attr("SameSite") == "Strict"
    assert cookie.path == "/"


def test_a_code_works_once(server: LocalServer) -> None:
    code = new_code(server.url)
    headers = {"Origin": server.url, CSRF_HEADER: "1"}
    first = requests.post(server.url + SESSION_PATH, json={"code": code}, headers=headers, timeout=10)
    again = requests.post(server.url + SESSION_PATH, json={"code": code}, headers=headers, timeout=10)
    assert first.status_code == 200 and cookie_name(server) in first.cookies
    assert again.status_code == 401 and "paijob local open" in again.json()["message"]
    assert cookie_name(server) not in again.cookies


def test_the_cookie_reads_the_rest_api_and_no_cookie_reads_nothing(server: LocalServer, client: PaiClient) -> None:
    job_id = client.submit(job_yaml("auth-read", ["echo hi"]))
    browser = log_in(server)
    assert [j["name"] for j in browser.get(f"{server.url}{API}/jobs").json()] == ["auth-read"]
    assert browser.get(f"{server.url}{API}/jobs/{job_id}").status_code == 200
    anonymous = requests.get(f"{server.url}{API}/jobs", timeout=10)
    assert anonymous.status_code == 401
    forged = requests.get(f"{server.url}{API}/jobs", cookies={cookie_name(server): "made-up"}, timeout=10)
    assert forged.status_code == 401


def test_log_locations_given_to_a_portal_session_hold_no_token(server: LocalServer, client: PaiClient) -> None:
    job_id = client.submit(job_yaml("auth-logs", ["echo hi"]))
    client.wait(job_id, poll=0.1, timeout=30)
    browser = log_in(server)
    detail = browser.get(f"{server.url}{API}/jobs/{job_id}").json()
    task = detail["taskRoles"]["trainer"]["taskStatuses"][0]
    locations = browser.get(f"{server.url}/rest-server{task['containerLog']}")
    assert locations.status_code == 200 and TOKEN not in locations.text
    (stdout,) = [loc["uri"] for loc in locations.json()["locations"] if loc["name"] == "stdout"]
    assert browser.get(stdout).text == "hi\n"  # the cookie reads the log itself too


@pytest.mark.parametrize("headers", [
    {},  # a form post from anywhere: no Origin checked, no header
    {"Origin": "http://127.0.0.1:1", CSRF_HEADER: "1"},  # another port of 127.0.0.1: the same "site"
    {"Origin": "https://evil.example", CSRF_HEADER: "1"},
    {"Origin": "__SELF__", CSRF_HEADER: "1", "Sec-Fetch-Site": "same-site"},
    {"Origin": "__SELF__"},  # the portal's origin but no CSRF header (a form cannot set one)
], ids=["bare", "other-port", "other-site", "sec-fetch-same-site", "no-csrf-header"])
def test_a_write_with_the_cookie_needs_the_portals_origin_and_header(
        server: LocalServer, client: PaiClient, headers: dict[str, str]) -> None:
    job_id = client.submit(job_yaml(f"auth-csrf-{len(client.list_jobs())}", ["sleep 30"]))
    browser = log_in(server)
    sent = {key: (server.url if value == "__SELF__" else value) for key, value in headers.items()}
    reply = stop_request(server, browser, job_id, **sent)
    assert reply.status_code == 403, reply.text
    assert client.get_job(job_id)["jobStatus"]["executionType"] == "START"
    client.stop(job_id)


def test_a_write_from_the_portal_page_stops_the_job(server: LocalServer, client: PaiClient) -> None:
    job_id = client.submit(job_yaml("auth-stop", ["sleep 30"]))
    browser = log_in(server)
    reply = stop_request(server, browser, job_id, Origin=server.url, **{"Sec-Fetch-Site": "same-origin",
                                                                        CSRF_HEADER: "1"})
    assert reply.status_code == 202, reply.text
    assert client.wait(job_id, poll=0.1, timeout=30)["jobStatus"]["state"] == "STOPPED"


PORTAL_HEADERS = {"Sec-Fetch-Site": "same-origin", CSRF_HEADER: "1"}  # what the portal's own fetch sends


def test_the_cookie_cannot_submit_a_job_or_write_anything_but_a_stop(server: LocalServer, client: PaiClient) -> None:
    """A leaked cookie (another local user's page on 127.0.0.1 receives it) must not run commands as you."""
    job_id = client.submit(job_yaml("auth-least", ["echo hi"]))
    browser = log_in(server)
    headers = {"Origin": server.url, **PORTAL_HEADERS}
    submit = browser.post(f"{server.url}{API}/jobs", data=job_yaml("auth-cookie-job", ["touch pwned"]),
                          headers={"Content-Type": "text/yaml", **headers})
    assert submit.status_code == 403, submit.text
    assert "only reads jobs and stops them" in submit.json()["message"] and "token" in submit.json()["message"]
    tag = browser.put(f"{server.url}{API}/jobs/{job_id}/tag", json={"value": "x"}, headers=headers)
    assert tag.status_code == 403
    assert [j["name"] for j in client.list_jobs()].count("auth-cookie-job") == 0
    assert client.get_job(job_id)["tags"] == []


def test_origin_is_compared_with_the_servers_own_address_not_the_host_header(
        server: LocalServer, client: PaiClient) -> None:
    job_id = client.submit(job_yaml("auth-host", ["sleep 30"]))
    cookie = log_in(server).cookies[cookie_name(server)]
    forged = requests.put(f"{server.url}{API}/jobs/{job_id}/executionType", json={"value": "STOP"}, timeout=10,
                          headers={"Host": "evil", "Origin": "http://evil",  # requests' jar would keep it for Host
                                   "Cookie": f"{cookie_name(server)}={cookie}", **PORTAL_HEADERS})
    assert forged.status_code == 403, forged.text
    assert client.get_job(job_id)["jobStatus"]["executionType"] == "START"
    client.stop(job_id)


def test_every_answer_says_nosniff_and_logs_stay_plain_text(server: LocalServer, client: PaiClient) -> None:
    job_id = client.submit(job_yaml("auth-sniff", ["echo '<html><script>alert(1)</script>'"]))
    client.wait(job_id, poll=0.1, timeout=30)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    detail = requests.get(f"{server.url}{API}/jobs/{job_id}", headers=auth, timeout=10)
    task = detail.json()["taskRoles"]["trainer"]["taskStatuses"][0]
    locations = requests.get(f"{server.url}/rest-server{task['containerLog']}", headers=auth, timeout=10)
    (stdout,) = [loc["uri"] for loc in locations.json()["locations"] if loc["name"] == "stdout"]
    log = requests.get(stdout, timeout=10)
    answers = [detail, locations, log, requests.get(stdout + "&tail-mode=true", timeout=10),
               requests.get(f"{server.url}{API}/jobs", timeout=10),  # 401
               requests.get(f"{server.url}{API}/nothing-here", headers=auth, timeout=10),  # 404
               requests.get(f"{server.url}/", timeout=10)]
    for answer in answers:
        assert answer.headers.get("X-Content-Type-Options") == "nosniff", (answer.url, answer.status_code)
    assert log.headers["Content-Type"].startswith("text/plain") and "<script>" in log.text
    assert answers[3].headers["Content-Type"].startswith("text/plain")


def test_a_read_from_another_origin_is_refused_even_with_the_cookie(server: LocalServer) -> None:
    browser = log_in(server)
    other = browser.get(f"{server.url}{API}/jobs", headers={"Origin": "http://127.0.0.1:1"})
    cross = browser.get(f"{server.url}{API}/jobs", headers={"Sec-Fetch-Site": "cross-site"})
    assert other.status_code == 403 and cross.status_code == 403
    typed = browser.get(f"{server.url}{API}/jobs", headers={"Sec-Fetch-Site": "none"})  # the address bar
    assert typed.status_code == 200


def test_the_bearer_token_still_works_alongside_a_stray_cookie(server: LocalServer) -> None:
    reply = requests.get(f"{server.url}{API}/jobs", cookies={cookie_name(server): "stale"},
                         headers={"Authorization": f"Bearer {TOKEN}", "Origin": "http://elsewhere"}, timeout=10)
    assert reply.status_code == 200


def test_log_out_ends_the_session(fresh: LocalServer) -> None:
    browser = log_in(fresh)
    stale = browser.cookies[cookie_name(fresh)]  # what a second tab would still send
    reply = browser.delete(fresh.url + SESSION_PATH, headers={"Origin": fresh.url, CSRF_HEADER: "1"})
    assert reply.status_code == 204
    assert cookie_name(fresh) not in browser.cookies
    assert requests.get(f"{fresh.url}{API}/jobs", cookies={cookie_name(fresh): stale}, timeout=10).status_code == 401


def test_pages_forbid_inline_scripts_and_framing(server: LocalServer) -> None:
    for path in ("/", "/job/u~j", "/static/portal/job.js"):
        reply = requests.get(server.url + path, timeout=10)
        assert reply.status_code == 200, path
        assert reply.headers["Content-Security-Policy"] == CSP
        assert reply.headers["X-Content-Type-Options"] == "nosniff"
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP and "frame-ancestors 'none'" in CSP
    page = requests.get(server.url + "/job/u~j", timeout=10).text
    assert not re.search(r"<script(?![^>]*\bsrc=)", page), "a page holds an inline script"
    assert not re.search(r"\son[a-z]+=", page), "a page holds an inline event handler"
    assert "http://" not in page and "https://" not in page, "a page loads something from elsewhere"


def test_the_static_files_make_elements_only_as_text() -> None:
    static = Path(__file__).resolve().parents[2] / "paijob" / "local" / "portal" / "static"
    for script in static.glob("*.js"):
        text = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in text, f"{script.name} uses {sink}"


def test_codes_expire_are_single_use_and_bounded() -> None:
    now = [1000.0]
    table = Sessions(clock=lambda: now[0])
    code = table.new_code()
    now[0] += portal_sessions.CODE_TTL + 1
    assert table.redeem(code) is None  # expired
    codes = [table.new_code() for _ in range(portal_sessions.MAX_CODES + 5)]
    assert table.redeem(codes[0]) is None  # pushed out by newer ones
    session = table.redeem(codes[-1])
    assert session is not None and table.valid(session)
    assert table.redeem(codes[-1]) is None
    now[0] += portal_sessions.SESSION_TTL + 1
    assert not table.valid(session)
