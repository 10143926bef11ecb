"use strict";
/* A job's page: summary and root cause, progress chart, tasks of an attempt, log viewer, attempts, config.
 * Everything is read from the REST API; the page refreshes every two seconds until the job has ended. */

const LOG_TAIL_BYTES = 64 * 1024; // a log opens at its end; "show the whole log" reads it from the start
const CHART_TAIL_BYTES = 8 * 1024 * 1024;
const LOG_KEEP_CHARS = 2 * 1024 * 1024; // the viewer keeps the newest 2 MiB of text
const MAX_ATTEMPTS_SHOWN = 20;

const view = {
  jobId: decodeURIComponent(location.pathname.replace(/^\/job\//, "")),
  latest: null, // GET /jobs/:id
  shown: null, // the detail of the attempt shown (the latest unless one is picked)
  picked: null, // the attempt picked in the selector, or null for the latest
  attempts: new Map(), // attempt id -> jobStatus (ended attempts never change)
  config: null,
  logTask: null, // "role/index" of the task whose log is shown
  log: null, // the log reader
  chart: null,
};

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const enc = encodeURIComponent;

/** Reads a growing log by byte ranges: its last ``tail`` bytes (0: all of it), then what is appended. */
class LogTail {
  constructor(uri, tail) {
    this.uri = uri;
    this.tail = tail;
    this.offset = null;
    this.start = 0;
    this.decoder = new TextDecoder();
  }

  range() {
    if (this.offset !== null) return `bytes=${this.offset}-`;
    return this.tail ? `bytes=-${this.tail}` : "bytes=0-";
  }

  /** The text appended since the last read ("" when none; the log may not exist yet). */
  async read() {
    const response = await api(this.uri, { headers: { Range: this.range() }, acceptStatus: [404, 416] });
    if (response.status === 404) return "";
    const contentRange = /bytes (\d+|\*)-?(\d*)\/(\d+)/.exec(response.headers.get("Content-Range") || "");
    if (response.status === 416) { // nothing new, or (werkzeug) a tail longer than the whole log
      if (this.offset !== null) return "";
      const total = contentRange ? Number(contentRange[3]) : 0;
      this.offset = this.start = Math.max(0, total - (this.tail || total));
      return total > 0 ? this.read() : "";
    }
    let data = new Uint8Array(await response.arrayBuffer());
    let first = response.status === 206 && contentRange ? Number(contentRange[1]) : 0;
    if (response.status === 200 && this.offset !== null) { // the server ignored the range
      data = data.slice(this.offset);
      first = this.offset;
    }
    if (this.offset === null) this.start = first;
    this.offset = first + data.byteLength;
    let text = this.decoder.decode(data, { stream: true });
    if (first > 0 && first === this.start && !this.cut) { // the tail began inside a line: drop its end
      this.cut = true;
      text = text.slice(text.indexOf("\n") + 1);
    }
    return text;
  }
}

// ----------------------------------------------------------------------------- summary

function gpusOf(config) {
  let total = 0;
  for (const role of Object.values((config && config.taskRoles) || {})) {
    total += (role.instances ?? 1) * ((role.resourcePerInstance || {}).gpu || 0);
  }
  return total;
}

/** One label and its value, kept together in one grid cell (HTML lets a div group a dt with its dd). */
function metaItem(name, value) {
  return [el("div", { dataset: { meta: name } }, el("dt", { text: name }), el("dd", { text: value }))];
}

function renderSummary(detail) {
  const status = detail.jobStatus;
  document.title = `${detail.name}: paijob local cluster`;
  document.getElementById("job-name").textContent = detail.name;
  document.getElementById("job-state").replaceChildren(stateBadge(status.state));
  document.body.dataset.jobState = status.state;
  const retries = status.retryDetails || {};
  document.getElementById("job-meta").replaceChildren(
    ...metaItem("User", status.username),
    ...metaItem("Virtual cluster", status.virtualCluster || "default"),
    ...metaItem("Submitted", formatTime(status.submissionTime)),
    ...metaItem("Started", formatTime(startedAt(status))),
    ...metaItem("Finished", formatTime(status.completedTime)),
    ...metaItem("Duration", formatDuration(durationOf(status))),
    ...metaItem("Retries", `${status.retries} (user ${retries.user ?? 0}, platform ${retries.platform ?? 0})`),
    ...metaItem("GPUs", view.config ? gpusOf(view.config) : "–"),
    ...metaItem("Attempt", status.attemptId));
  document.getElementById("stop").hidden = PAI.TERMINAL.has(status.state);
}

function exitMeaning(spec) {
  if (!spec) return "";
  return spec.reason ? `${spec.phrase}: ${spec.reason}` : spec.phrase;
}

/** The runtime's exitDiagnostics (OpenPAI's JobAttempt shape), as lines of text. */
function diagnosticsLines(diagnostics) {
  if (!diagnostics) return [];
  if (typeof diagnostics !== "object") return [String(diagnostics)];
  const runtime = diagnostics.runtime || {};
  const logs = runtime.errorLogs || {};
  return [
    diagnostics.diagnosticsSummary,
    runtime.originUserExitCode !== undefined && runtime.originUserExitCode !== null
      ? `the command exited with ${runtime.originUserExitCode}` : null,
    runtime.name ? `matched: ${runtime.name}` : null,
    logs.user ? `user log:\n${logs.user}` : null,
    logs.platform ? `platform log:\n${logs.platform}` : null,
    diagnostics.launcher && diagnostics.launcher !== diagnostics.diagnosticsSummary ? diagnostics.launcher : null,
  ].filter(Boolean);
}

/** The failing rank as paijob-runtime recorded it (a task's paijobRootCause, never its wording): a node that
 *  reports its own worker beats one that reports it from another node, as in `paijob status`. */
function recordedCause(detail) {
  const found = tasksOf(detail).map((task) => ({ task, record: task.paijobRootCause }))
    .filter(({ record }) => record && typeof record.rank === "number");
  if (found.length === 0) return null;
  const own = found.find(({ record }) => record.worker_node === null || record.worker_node === record.node_rank);
  const { task, record } = own || found[0];
  const where = own ? `on ${taskKey(task)}` : `on node rank ${record.worker_node}`;
  return `rank ${record.rank} ${where} failed with ${record.how}` + (record.error ? `: ${record.error}` : "")
    + (record.where ? ` (${record.where})` : "");
}

// The slow-rank doctor's verdict: its line, then each rank's figures (as `paijob status` prints them).
function slowRank(slow) {
  if (!slow || typeof slow.line !== "string") return "";
  const percent = (share) => `${Math.round(share * 100)}%`;
  const lines = [slow.line + (slow.final ? " (over the run)" : "")];
  const figures = Array.isArray(slow.figures) ? slow.figures : [];
  for (const f of figures.slice(0, 16)) {
    const doing = Object.entries(f.activity || {}).sort((a, b) => b[1] - a[1])
      .map(([name, share]) => `${name} ${percent(share)}`).join(", ");
    lines.push(`rank ${f.rank} (node rank ${f.node_rank}, ${f.host}): waits ${percent(f.wait_share)} of the time, `
      + `arrived last ${f.last} times` + (doing ? `; ${doing}` : "")
      + (typeof f.cpu_wait === "number" ? `; waits for a CPU ${percent(f.cpu_wait)}` : ""));
  }
  if (figures.length > 16) lines.push(`... and ${figures.length - 16} more ranks`);
  return lines.join("\n");
}

// paijob-runtime's restarts of the workers inside the attempt (--max-restarts), as `paijob status` prints them.
function restartLines(restarts) {
  if (!Array.isArray(restarts)) return "";
  return restarts.filter((r) => r && r.kind === "restart" && typeof r.cause === "string")
    .map((r) => `restart ${r.number} of ${r.limit} after ${r.cause}; ${r.nodes} node(s), world size ${r.world_size}; `
      + `${Number(r.lost_s).toFixed(1)}s from the failure to the new workers`).join("\n");
}

function renderCause(detail) {
  const status = detail.jobStatus;
  const items = [];
  const add = (name, value) => value && items.push(el("dt", { text: name }), el("dd", {}, el("pre", { class: "wrap", text: value })));
  if (status.appExitTriggerMessage) {
    const where = status.appExitTriggerTaskRoleName !== null && status.appExitTriggerTaskRoleName !== undefined
      ? ` (task ${status.appExitTriggerTaskRoleName}/${status.appExitTriggerTaskIndex})` : "";
    add("Trigger", status.appExitTriggerMessage + where);
  }
  if (status.appExitCode !== null && status.appExitCode !== undefined && status.appExitSpec) {
    add("Exit code", `${status.appExitCode}: ${exitMeaning(status.appExitSpec)} (${status.appExitSpec.type})`);
  }
  add("Stalled", stallLine(status.paijobStall));  // paijob-runtime's hang watch, while the job runs
  add("Slow rank", slowRank(status.paijobSlowRank));  // paijob-runtime's slow-rank doctor
  add("Restarts", restartLines(status.paijobRestarts));  // paijob-runtime's --max-restarts
  add("Failed rank", recordedCause(detail));
  add("Root cause", diagnosticsLines(detail.exitDiagnostics || status.exitDiagnostics).join("\n"));
  if (status.appExitDiagnostics !== status.appExitTriggerMessage) add("Diagnostics", status.appExitDiagnostics);
  document.getElementById("cause-list").replaceChildren(...items);
  const cause = document.getElementById("cause");
  const ended = PAI.TERMINAL.has(status.state);
  cause.hidden = items.length === 0;
  // a running job has not ended: what the doctors say of it so far is its progress
  cause.querySelector("h2").textContent = ended ? "Why it ended" : "Progress";
  cause.classList.toggle("bad", ended ? status.state !== "SUCCEEDED" : Boolean(status.paijobStall));
}

// ----------------------------------------------------------------------------- tasks and attempts

function tasksOf(detail) {
  const tasks = [];
  for (const [role, entry] of Object.entries(detail.taskRoles || {})) {
    for (const task of entry.taskStatuses || []) tasks.push({ role, ...task });
  }
  return tasks;
}

function taskKey(task) {
  return `${task.role}/${task.taskIndex}`;
}

function taskRow(task) {
  const key = taskKey(task);
  const button = el("button", { type: "button", class: "link", text: "view", dataset: { task: key } });
  button.addEventListener("click", () => openLog(key, false));
  return el("tr", { dataset: { task: key, state: task.taskState }, class: key === view.logTask ? "picked" : null },
    el("td", { text: task.role }),
    el("td", { class: "num", text: task.taskIndex }),
    el("td", {}, stateBadge(task.taskState)),
    el("td", { class: "num", text: task.containerExitCode ?? "–" }),
    el("td", { class: "meaning", text: exitMeaning(task.containerExitSpec) }),
    el("td", { class: "meaning", text: task.containerExitDiagnostics || "" }),
    el("td", { class: "num", text: task.retries ?? 0 }),
    el("td", { text: formatTime(startedAt(task)) }),
    el("td", { text: formatTime(task.completedTime) }),
    el("td", {}, button));
}

function renderTasks(detail) {
  const rows = tasksOf(detail).map(taskRow);
  document.getElementById("task-rows").replaceChildren(...rows);
  const select = document.getElementById("attempt");
  const latest = view.latest.jobStatus.attemptId;
  if (select.options.length !== latest + 1) {
    const options = [];
    for (let a = latest; a >= 0; a--) options.push(el("option", { value: a, text: a === latest ? `${a} (latest)` : a }));
    select.replaceChildren(...options);
    select.value = String(view.picked ?? latest);
  }
}

function attemptRow(status, attempt) {
  const row = el("tr", { dataset: { attempt }, class: attempt === detailAttempt() ? "picked" : null },
    el("td", { class: "num", text: attempt }),
    el("td", {}, stateBadge(status.attemptState || status.state)),
    el("td", { class: "num", text: status.appExitCode ?? "–" }),
    el("td", { class: "meaning", text: exitMeaning(status.appExitSpec) }),
    el("td", { text: formatTime(status.appLaunchedTime || status.appCreatedTime) }),
    el("td", { text: formatTime(status.appCompletedTime) }),
    el("td", { class: "meaning", text: status.appExitTriggerMessage || status.appExitDiagnostics || "" }));
  row.addEventListener("click", () => pickAttempt(attempt));
  return row;
}

async function renderAttempts() {
  const latest = view.latest.jobStatus.attemptId;
  view.attempts.set(latest, view.latest.jobStatus);
  const shown = [];
  for (let a = latest; a >= 0 && shown.length < MAX_ATTEMPTS_SHOWN; a--) {
    if (!view.attempts.has(a)) view.attempts.set(a, (await apiJson(`/jobs/${enc(view.jobId)}/attempts/${a}`)).jobStatus);
    shown.push(attemptRow(view.attempts.get(a), a));
  }
  document.getElementById("attempt-rows").replaceChildren(...shown);
}

function detailAttempt() {
  return view.picked ?? view.latest.jobStatus.attemptId;
}

async function pickAttempt(attempt) {
  view.picked = attempt === view.latest.jobStatus.attemptId ? null : attempt;
  document.getElementById("attempt").value = String(attempt);
  await refresh();
  const first = tasksOf(view.shown)[0];
  if (first) openLog(taskKey(first), false);
}

// ----------------------------------------------------------------------------- logs

function findTask(key) {
  return tasksOf(view.shown || view.latest).find((task) => taskKey(task) === key) || null;
}

function taskEnded(key) {
  const task = findTask(key);
  return !task || PAI.TERMINAL.has(task.taskState) || PAI.TERMINAL.has(view.latest.jobStatus.state);
}

/** The URL of one stream of a task's log (the REST API's log locations). */
async function logUri(task, stream) {
  if (!task || !task.containerLog) return null;
  const locations = await apiJson(task.containerLog.replace(/^\/api\/v2/, ""));
  const location = (locations.locations || []).find((entry) => entry.name === stream);
  return location ? location.uri : null;
}

function appendLog(pre, text) {
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
  pre.append(text);
  if (pre.textContent.length > LOG_KEEP_CHARS) pre.textContent = pre.textContent.slice(-LOG_KEEP_CHARS / 2);
  if (atBottom && document.getElementById("follow").checked) pre.scrollTop = pre.scrollHeight;
}

function logStatus(reader, key) {
  const parts = [];
  if (reader.start > 0) parts.push(`showing from byte ${reader.start.toLocaleString()} of the log`);
  if (taskEnded(key)) parts.push("the task has ended");
  else if (document.getElementById("follow").checked) parts.push("following");
  document.getElementById("log-status").textContent = parts.join("; ");
  document.getElementById("whole-log").hidden = reader.start === 0;
}

async function openLog(key, whole) {
  view.logTask = key;
  const stream = document.querySelector("input[name=stream]:checked").value;
  const pre = document.getElementById("log-text");
  pre.replaceChildren();
  document.getElementById("log-task").textContent = `${key}, ${stream}`;
  for (const row of document.querySelectorAll("#task-rows tr")) row.classList.toggle("picked", row.dataset.task === key);
  const task = findTask(key);
  const opening = { source: task && task.containerLog };
  view.log = opening; // a refresh meanwhile sees this log as open
  const uri = await logUri(task, stream);
  if (view.log !== opening) return;
  if (!uri) {
    pre.textContent = "(no log yet: the task has not started)";
    return;
  }
  const reader = new LogTail(uri, whole ? 0 : LOG_TAIL_BYTES);
  reader.source = task.containerLog;
  view.log = reader;
  pre.dataset.reader = uri;
  await followLog(reader, key, pre);
}

/** Read the log while it is the one shown; past its end only while following a running task. */
async function followLog(reader, key, pre) {
  if (reader.running) return;
  reader.running = true;
  try {
    while (view.log === reader) {
      const ended = taskEnded(key);
      const text = await reader.read();
      if (view.log !== reader) break;
      if (text) appendLog(pre, text);
      logStatus(reader, key);
      if (!text && (ended || !document.getElementById("follow").checked)) break;
      if (!text) await sleep(1000);
    }
  } finally {
    reader.running = false;
  }
}

// ----------------------------------------------------------------------------- progress chart

/** Feed the chart from the first task's combined log (rank 0 prints the progress) until the job ends. */
async function followProgress() {
  const task = tasksOf(view.latest)[0];
  if (!task || !task.containerLog || (view.chart && view.chart.source === task.containerLog)) return;
  const chart = { source: task.containerLog, progress: new Progress() };
  view.chart = chart;
  const uri = await logUri(task, "all");
  if (!uri || view.chart !== chart) return;
  chart.reader = new LogTail(uri, CHART_TAIL_BYTES);
  document.getElementById("progress-source").textContent = `(from ${taskKey(task)}'s log, attempt ${view.latest.jobStatus.attemptId})`;
  drawCharts(chart.progress);
  while (view.chart === chart) {
    const ended = PAI.TERMINAL.has(view.latest.jobStatus.state);
    const text = await chart.reader.read();
    if (text) {
      chart.progress.add(text);
      drawCharts(chart.progress);
    }
    if (!text && ended) break;
    if (!text) await sleep(1000);
  }
  chart.progress.add("\n");
  if (view.chart === chart) drawCharts(chart.progress, true);
}

function drawCharts(progress, ended = false) {
  const series = progress.series();
  drawChart(document.getElementById("loss-chart"), series.loss, "loss", ended);
  drawChart(document.getElementById("rate-chart"), series.rate, "images/s", ended);
}

// ----------------------------------------------------------------------------- config, stop, refresh

async function loadConfig() {
  const response = await api(`${PAI.API}/jobs/${enc(view.jobId)}/config`);
  const text = await response.text();
  try {
    view.config = JSON.parse(text);
    document.getElementById("config-text").textContent = JSON.stringify(view.config, null, 2);
  } catch (_) {
    document.getElementById("config-text").textContent = text;
  }
}

async function stopJob() {
  if (!window.confirm(`Stop job ${view.jobId}? Its running tasks are killed (SIGTERM, then SIGKILL).`)) return;
  const button = document.getElementById("stop");
  button.disabled = true;
  try {
    await api(`${PAI.API}/jobs/${enc(view.jobId)}/executionType`, { method: "PUT", json: { value: "STOP" } });
    await refresh();
  } catch (problem) {
    showNotice(`Could not stop the job: ${problem.message || problem}`);
  } finally {
    button.disabled = false;
  }
}

async function refresh() {
  view.latest = await apiJson(`/jobs/${enc(view.jobId)}`);
  view.shown = view.picked === null ? view.latest
    : await apiJson(`/jobs/${enc(view.jobId)}/attempts/${view.picked}`);
  renderSummary(view.latest);
  renderCause(view.shown);
  renderTasks(view.shown);
  await renderAttempts();
  const logTask = view.logTask && findTask(view.logTask);
  if (logTask && logTask.containerLog && (!view.log || view.log.source !== logTask.containerLog)) {
    openLog(view.logTask, false);
  }
  followProgress().catch(() => null);
  return !PAI.TERMINAL.has(view.latest.jobStatus.state);
}

portalPage(async () => {
  await loadConfig();
  await refresh();
  for (const id of ["summary", "progress", "tasks", "logs", "attempts", "config"]) document.getElementById(id).hidden = false;
  document.getElementById("stop").addEventListener("click", stopJob);
  document.getElementById("attempt").addEventListener("change", (event) => pickAttempt(Number(event.target.value)));
  for (const radio of document.querySelectorAll("input[name=stream]")) {
    radio.addEventListener("change", () => view.logTask && openLog(view.logTask, false));
  }
  document.getElementById("follow").addEventListener("change", () => {
    if (view.log && view.logTask) followLog(view.log, view.logTask, document.getElementById("log-text"));
  });
  document.getElementById("whole-log").addEventListener("click", () => view.logTask && openLog(view.logTask, true));
  drawCharts(new Progress());
  const first = tasksOf(view.latest)[0];
  if (first) openLog(taskKey(first), false);
  setTimeout(() => poll(refresh), PAI.POLL_MS);
});
