"use strict";
/* What both pages share: the REST calls (session cookie, CSRF header on writes), the login with the
 * link's one-time code, and el(), the only way the pages make elements. el() puts every value in the
 * page as text (textContent / text nodes), never as HTML: a job name or log line holding markup
 * stays text. */

const PAI = {
  API: "/rest-server/api/v2",
  SESSION: "/portal/api/session",
  CSRF_HEADER: "X-Paijob-Portal",
  TERMINAL: new Set(["SUCCEEDED", "FAILED", "STOPPED"]),
  POLL_MS: 2000,
};

class NotLoggedIn extends Error {}

/** An element with properties and children; strings become text nodes. */
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "on") for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    else node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

async function errorMessage(response) {
  try {
    const body = await response.json();
    return body.message || `${response.status} ${response.statusText}`;
  } catch (_) {
    return `${response.status} ${response.statusText}`;
  }
}

/** fetch on this server with the session cookie; writes carry the CSRF header. */
async function api(path, options = {}) {
  const init = { credentials: "same-origin", ...options, headers: { ...(options.headers || {}) } };
  const method = (init.method || "GET").toUpperCase();
  if (method !== "GET" && method !== "HEAD") init.headers[PAI.CSRF_HEADER] = "1";
  if (init.json !== undefined) {
    init.body = JSON.stringify(init.json);
    init.headers["Content-Type"] = "application/json";
    delete init.json;
  }
  const response = await fetch(path, init);
  if (response.status === 401) throw new NotLoggedIn(await errorMessage(response));
  if (!response.ok && !(init.acceptStatus || []).includes(response.status)) {
    throw new Error(await errorMessage(response));
  }
  return response;
}

async function apiJson(path) {
  return (await api(PAI.API + path)).json();
}

/** Trade the link's one-time code (#code=...) for the session cookie, and drop it from the address bar. */
async function logIn() {
  const match = /^#code=([A-Za-z0-9_-]{1,200})$/.exec(location.hash);
  if (!match) return null;
  history.replaceState(null, "", location.pathname + location.search);
  try {
    await api(PAI.SESSION, { method: "POST", json: { code: match[1] } });
    return null;
  } catch (problem) {
    return problem.message; // shown only if the browser has no session either
  }
}

function showNotice(text, kind = "error") {
  const notice = document.getElementById("notice");
  notice.className = `notice ${kind}`;
  notice.replaceChildren(...[].concat(text).map((part) => (part instanceof Node ? part : document.createTextNode(part))));
  notice.hidden = false;
}

function hideNotice() {
  document.getElementById("notice").hidden = true;
}

function showLoggedOut(reason) {
  for (const section of document.querySelectorAll("main > section")) section.hidden = true;
  document.getElementById("logout").hidden = true;
  showNotice([
    el("strong", { text: "Not logged in. " }),
    reason ? `${reason} ` : "",
    "Run ", el("code", { text: "paijob local open" }),
    " in a terminal: it prints a link that logs this browser in.",
  ]);
  document.body.dataset.session = "none";
}

/** Log in if the address holds a code, then run ``start``; every page begins here. */
function portalPage(start) {
  // a link pasted into a tab already showing this page only changes the fragment: load the page again
  window.addEventListener("hashchange", () => location.hash.startsWith("#code=") && location.reload());
  document.addEventListener("DOMContentLoaded", async () => {
    const codeProblem = await logIn();
    document.getElementById("logout").addEventListener("click", async () => {
      await api(PAI.SESSION, { method: "DELETE" }).catch(() => null);
      location.reload();
    });
    try {
      await start();
      document.body.dataset.session = "live";
      document.getElementById("logout").hidden = false;
    } catch (problem) {
      if (problem instanceof NotLoggedIn) showLoggedOut(codeProblem || "");
      else showNotice(String(problem.message || problem));
    }
  });
}

/** Call ``task`` now and every ``ms`` until it returns false; a lost session ends it with the notice. */
function poll(task, ms = PAI.POLL_MS) {
  const tick = async () => {
    let again = true;
    try {
      again = (await task()) !== false;
      if (document.body.dataset.session === "live") hideNotice();
    } catch (problem) {
      if (problem instanceof NotLoggedIn) {
        showLoggedOut(problem.message);
        return;
      }
      showNotice(`Cannot reach the local cluster (${problem.message || problem}); retrying.`);
    }
    if (again) setTimeout(tick, ms);
  };
  return tick();
}

function pad(n) {
  return String(n).padStart(2, "0");
}

function formatTime(ms) {
  if (!ms) return "–";
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** A duration as paijob writes every one (paijob/common/durations.py, `paijob status` and `list`):
 *  0.4 s, 42 s, 3 min 14 s, 2 h 5 min. */
function formatDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return "–";
  const seconds = ms / 1000;
  if (seconds < 9.95) return `${seconds.toFixed(1)} s`;
  const s = Math.floor(seconds + 0.5);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// The hang watch's stall record (data with its version and kind): "no progress for 1 min 35 s on rank 1" (as paijob.common.records.StallRecord.describe).
function stallLine(stall) {
  if (!stall || stall.kind !== "stall" || !Array.isArray(stall.ranks) || stall.ranks.length === 0) return "";
  const noun = stall.ranks.length > 1 ? "ranks" : "rank";
  return `no progress for ${formatDuration(stall.seconds * 1000)} on ${noun} ${rankRanges(stall.ranks)}`;
}

// "0, 2-7": sorted ranks with runs folded (as paijob.common.records.rank_ranges).
function rankRanges(ranks) {
  const values = [...new Set(ranks)].sort((a, b) => a - b);
  const parts = [];
  for (let i = 0; i < values.length; i++) {
    let j = i;
    while (j + 1 < values.length && values[j + 1] === values[j] + 1) j++;
    parts.push(i === j ? `${values[i]}` : `${values[i]}-${values[j]}`);
    i = j;
  }
  return parts.join(", ");
}

/** When a job or task started: launched, else created (queued). */
function startedAt(item) {
  return item.launchedTime || item.createdTime || item.submissionTime || null;
}

function durationOf(item) {
  const start = startedAt(item);
  return start ? (item.completedTime || Date.now()) - start : null;
}

function stateBadge(state) {
  return el("span", { class: `state state-${String(state || "").toLowerCase()}`, text: state || "?" });
}

function jobPath(jobId) {
  return `/job/${encodeURIComponent(jobId)}`;
}
