"use strict";
/* The job list: GET /jobs every two seconds, filtered by state and keyword and sorted here. */

const list = { jobs: [], sortKey: "submissionTime", descending: true };

const SORT_VALUES = {
  started: startedAt,
  duration: durationOf,
};

function sortValue(job, key) {
  const value = SORT_VALUES[key] ? SORT_VALUES[key](job) : job[key];
  return value === null || value === undefined ? "" : value;
}

function visibleJobs() {
  const state = document.getElementById("state-filter").value;
  const words = document.getElementById("keyword").value.trim().toLowerCase().split(/\s+/).filter(Boolean);
  const shown = list.jobs.filter((job) => {
    if (state && job.state !== state) return false;
    const haystack = `${job.name} ${job.username}`.toLowerCase();
    return words.every((word) => haystack.includes(word));
  });
  const sign = list.descending ? -1 : 1;
  return shown.sort((a, b) => {
    const x = sortValue(a, list.sortKey);
    const y = sortValue(b, list.sortKey);
    if (x < y) return -sign;
    if (x > y) return sign;
    return 0;
  });
}

/** What the doctors say of a running job, beside its state: stalled (the hang watch), slow (the slow-rank
 *  doctor); the whole line in the marker's title. */
function markers(job) {
  const found = [];
  const stalled = stallLine(job.paijobStall);
  if (stalled) {
    found.push(el("span", { class: "marker marker-stalled", text: "stalled", title: stalled,
      dataset: { marker: "stalled" } }));
  }
  const slow = job.paijobSlowRank;
  if (slow && typeof slow.line === "string") {
    found.push(el("span", { class: "marker marker-slow", text: "slow rank", title: slow.line,
      dataset: { marker: "slow" } }));
  }
  return found;
}

function jobRow(job) {
  const id = `${job.username}~${job.name}`;
  return el("tr", { dataset: { job: id, state: job.state } },
    el("td", {}, el("a", { href: jobPath(id), text: job.name })),
    el("td", { text: job.username }),
    el("td", {}, stateBadge(job.state), ...markers(job)),
    el("td", { text: formatTime(startedAt(job)) }),
    el("td", { text: formatTime(job.completedTime) }),
    el("td", { text: formatDuration(durationOf(job)) }),
    el("td", { class: "num", text: job.retries ?? 0 }),
    el("td", { class: "num", text: job.totalGpuNumber ?? 0 }));
}

function renderJobs() {
  const shown = visibleJobs();
  const rows = shown.map(jobRow);
  if (!rows.length) {
    const why = list.jobs.length ? "No job matches the filter." : "No jobs yet: `paijob run --local` submits one.";
    rows.push(el("tr", {}, el("td", { colspan: 8, class: "empty", text: why })));
  }
  document.getElementById("job-rows").replaceChildren(...rows);
  document.getElementById("count").textContent = `${shown.length} of ${list.jobs.length} job(s)`;
  for (const th of document.querySelectorAll("#job-table th")) {
    const sorted = th.dataset.key === list.sortKey;
    th.setAttribute("aria-sort", sorted ? (list.descending ? "descending" : "ascending") : "none");
  }
}

portalPage(async () => {
  for (const th of document.querySelectorAll("#job-table th")) {
    th.addEventListener("click", () => {
      list.descending = th.dataset.key === list.sortKey ? !list.descending : false;
      list.sortKey = th.dataset.key;
      renderJobs();
    });
  }
  document.getElementById("state-filter").addEventListener("change", renderJobs);
  document.getElementById("keyword").addEventListener("input", renderJobs);
  list.jobs = await apiJson("/jobs"); // the first call tells whether this browser is logged in
  document.getElementById("jobs").hidden = false;
  renderJobs();
  setTimeout(() => poll(async () => {
    list.jobs = await apiJson("/jobs");
    renderJobs();
  }), PAI.POLL_MS);
});
