// buildrisk-radar console: polls the /v1 JSON API with the session cookie
// and renders it. Plain DOM, no framework, no build step. Every value from
// the API goes into the page as text, never as HTML.
"use strict";

(function () {
  const POLL_MS = 2000;
  const ALERTS_EVERY = 15; // polls between alert refreshes
  const HISTORY_EVERY = 5; // polls between refreshes of the jobs' last days
  const HISTORY_DAYS = 14;
  // The runs stopped or capped today: GET /v1/requests filtered so (the
  // link in the section's hint is the same list).
  const STOPPED_TODAY = "/v1/requests?outcome=STOPPED&endedOn=today&limit=100";
  const RUNNING = ["STARTING", "STARTED", "STOPPING"];

  const role = document.body.dataset.role;
  const operator = role === "operator";
  const csrf = document.querySelector('meta[name="csrf-token"]').content;

  const state = {
    jobs: [], workers: [], requests: [], providers: [], coverage: [], history: {}, extraRequests: {}, stopped: null,
    serverNow: Date.now(), polls: 0, busy: false, form: null,
  };

  // ---- DOM helpers ----------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "dataset") Object.assign(node.dataset, v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  // fillTable replaces a table's rows. Each cell gets its column's name in
  // data-label, which the phone layout shows in front of the value.
  function fillTable(id, rows, empty) {
    const body = document.querySelector("#" + id + " tbody");
    const labels = Array.from(document.querySelectorAll("#" + id + " thead th"), (th) => th.textContent);
    for (const row of rows) {
      Array.from(row.children).forEach((td, i) => { td.dataset.label = labels[i] || ""; });
    }
    body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: labels.length, class: "empty" }, empty))]));
  }

  function num(n) { return n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"); }

  function age(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    const s = Math.max(0, Math.round(seconds));
    if (s < 90) return s + "s ago";
    if (s < 5400) return Math.round(s / 60) + "m ago";
    return Math.round(s / 3600) + "h ago";
  }

  function since(iso) { return iso ? age((state.serverNow - Date.parse(iso)) / 1000) : "—"; }

  // when shows a time in the browser's zone, with the zone named ("GMT+9",
  // "KST"), so it never reads as the schedule's zone by mistake.
  function when(iso) { return iso ? new Date(iso).toLocaleString(undefined, { timeZoneName: "short" }) : "—"; }

  // scheduleZone is the zone schedules tick in (BUILDRISK_TIMEZONE), which
  // the server writes on the page: every time the api sends is UTC.
  const scheduleZone = document.body.dataset.timezone || "UTC";

  // deadlineColumn: the server writes the job table's Deadline column when
  // some job has a deadline (BUILDRISK_DEADLINE_<JOB>), and only then.
  const deadlineColumn = document.querySelector("#jobs thead th.deadline") !== null;

  // duration says how long a span of seconds is, sign dropped: "40 s",
  // "3 min", "2 h 5 min".
  function duration(seconds) {
    const s = Math.round(Math.abs(seconds));
    if (s < 60) return s + " s";
    const m = Math.round(s / 60);
    if (m < 90) return m + " min";
    return Math.floor(m / 60) + " h" + (m % 60 ? " " + (m % 60) + " min" : "");
  }

  function statusBadge(status) {
    return el("span", { class: "status s-" + String(status || "none").toLowerCase() }, status || "—");
  }

  function requestLink(id) {
    return el("a", { href: "#request-" + id, class: "request-link" }, "request " + id);
  }

  // ---- API ------------------------------------------------------------

  class APIError extends Error {
    constructor(status, problem) {
      super(problemText(status, problem));
      this.status = status;
      this.problem = problem || {};
    }
  }

  // problemText turns an RFC 9457 problem into a sentence: its detail, then
  // each field error as "location: message".
  function problemText(status, problem) {
    const p = problem || {};
    let text = (p.title || "HTTP " + status) + ": " + (p.detail || "no detail given");
    const fields = (p.errors || []).filter((e) => e.location).map((e) => e.location + ": " + e.message);
    if (fields.length) text += " (" + fields.join("; ") + ")";
    return text;
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (method !== "GET") {
      headers["Content-Type"] = "application/json";
      headers["X-CSRF-Token"] = csrf;
    }
    let resp;
    try {
      resp = await fetch(path, {
        method, headers, credentials: "same-origin",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new APIError(0, { title: "The API did not answer", detail: String(err.message || err) });
    }
    const date = resp.headers.get("Date");
    if (date) state.serverNow = Date.parse(date);
    const text = await resp.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (_) { data = { detail: text }; }
    }
    if (!resp.ok) throw new APIError(resp.status, data);
    return data;
  }

  // ---- errors ---------------------------------------------------------

  // showError puts an API error on the page in words. A 409 that names the
  // active request links to it; a 401 links to the login page.
  function errorNode(context, err) {
    const text = err.message || String(err);
    const parts = [el("strong", {}, context + " failed. "), /[.!?)]$/.test(text) ? text : text + "."];
    const p = err.problem || {};
    if (p.activeRequestId) parts.push(" The active one is ", requestLink(p.activeRequestId), "; wait for it or stop it.");
    if (err.status === 401) parts.push(" ", el("a", { href: "/login" }, "Log in again"), ".");
    if (err.status === 403 && /CSRF/.test(err.message)) parts.push(" ", el("a", { href: "/" }, "Reload the console"), ".");
    return parts;
  }

  function showError(context, err, slot) {
    const box = document.getElementById("errors");
    if (slot) {
      const old = box.querySelector('[data-slot="' + slot + '"]');
      if (old) old.remove();
    }
    const close = el("button", { type: "button", class: "link dismiss", "aria-label": "dismiss", onclick: (e) => e.target.closest(".message").remove() }, "×");
    box.append(el("div", { class: "message error", dataset: { slot: slot || "", status: String(err.status || 0) } }, errorNode(context, err), close));
  }

  function clearError(slot) {
    const old = document.querySelector('#errors [data-slot="' + slot + '"]');
    if (old) old.remove();
  }

  function notice(text, ...extra) {
    const box = document.getElementById("errors");
    const close = el("button", { type: "button", class: "link dismiss", "aria-label": "dismiss", onclick: (e) => e.target.closest(".message").remove() }, "×");
    box.append(el("div", { class: "message info" }, text, ...extra, close));
  }

  // ---- polling --------------------------------------------------------

  async function refresh() {
    if (state.busy) return;
    state.busy = true;
    try {
      const [jobs, workers, requests, providers, coverage, stopped] = await Promise.all([
        api("GET", "/v1/jobs"), api("GET", "/v1/workers"),
        api("GET", "/v1/requests?limit=25"), api("GET", "/v1/providers"), api("GET", "/v1/coverage"),
        api("GET", STOPPED_TODAY),
      ]);
      state.stopped = stopped;
      state.coverage = coverage.coverage;
      state.jobs = jobs.jobs;
      state.workers = workers.workers;
      state.requests = requests.requests;
      state.providers = providers.providers;
      // Active requests older than the page of recent ones: fetch them too,
      // so every running job can be tied to its worker.
      const known = new Set(state.requests.map((r) => r.requestId));
      const missing = state.jobs.map((j) => j.activeRequestId).filter((id) => id && !known.has(id));
      state.extraRequests = {};
      for (const r of await Promise.all(missing.map((id) => api("GET", "/v1/requests/" + id)))) {
        state.extraRequests[r.requestId] = r;
      }
      if (state.polls % HISTORY_EVERY === 0) {
        const hist = await Promise.all(state.jobs.map((j) => api("GET", "/v1/jobs/" + encodeURIComponent(j.name) + "/history?days=" + HISTORY_DAYS)));
        state.history = Object.fromEntries(hist.map((h) => [h.job, h.days]));
      }
      if (state.polls % ALERTS_EVERY === 0) renderAlerts(await api("GET", "/v1/alerts"));
      if (operator && state.polls % ALERTS_EVERY === 0) renderAudit(await api("GET", "/v1/audit?limit=20"));
      state.polls++;
      clearError("poll");
      render();
      await refreshDetail();
      await followRequest();
      document.getElementById("updated").textContent = new Date(state.serverNow).toLocaleTimeString(undefined, { timeZoneName: "short" });
    } catch (err) {
      showError("Refreshing", err, "poll");
    } finally {
      state.busy = false;
    }
  }

  function allRequests() {
    return state.requests.concat(Object.values(state.extraRequests));
  }

  function workerByID(id) { return state.workers.find((w) => w.id === id); }

  function providerOf(job) {
    const j = state.jobs.find((x) => x.name === job);
    return j && j.provider ? state.providers.find((p) => p.provider === j.provider) : null;
  }

  function budgetText(p) {
    if (!p) return "no provider";
    if (p.remaining === null) return p.provider + ": no cap (" + num(p.usedToday) + " used)";
    return p.provider + ": " + num(p.remaining) + " of " + num(p.dailyCap);
  }

  // abandonable tells whether the API would accept abandoning the job's
  // running execution: it is running and the worker holding it is dead.
  function abandonable(job) {
    const exec = job.lastExecution;
    if (!job.running || !exec || !RUNNING.includes(exec.status)) return false;
    const req = allRequests().find((r) => r.execution && r.execution.id === exec.id);
    if (!req || !req.workerId) return false;
    const w = workerByID(req.workerId);
    return !w || !w.alive;
  }

  // ---- rendering ------------------------------------------------------

  function render() {
    renderJobs();
    renderRequests();
    renderStopped();
    renderWorkers();
    renderProviders();
    renderCoverage();
    renderHistory();
  }

  // renderHistory draws each job's last days as a strip, oldest first: the
  // colour is the day's outcome, the bar's height its coverage %.
  function renderHistory() {
    fillTable("history", state.jobs.filter((j) => state.history[j.name]).map((j) => el("tr", { dataset: { job: j.name } },
      el("td", {}, j.name),
      el("td", {}, el("div", { class: "strip" }, state.history[j.name].slice().reverse().map((d) => {
        // A day with no target at all is neither covered nor "none": it
        // gets no bar and a dashed outline of its own (the legend's
        // "no targets"), not the full bar its 100% would draw.
        const noTargets = d.targets === 0;
        const pct = d.percent === null || noTargets ? null : Math.round(d.percent * 10) / 10;
        const cov = noTargets ? "no targets (0 of 0)"
          : pct === null ? "no coverage" : pct + "% (" + num(d.current) + " of " + num(d.targets) + ")";
        // The height through the CSSOM: the CSP refuses style attributes.
        const bar = pct === null ? null : el("span", { class: "pct" });
        if (bar) bar.style.height = pct + "%";
        return el("span", { class: "day o-" + d.outcome + (noTargets ? " no-targets" : ""), title: d.day + ": " + d.outcome + ", " + cov,
          dataset: { day: d.day, outcome: d.outcome, percent: pct === null ? "" : String(pct) } }, bar);
      }))))), "no job");
  }

  // renderCoverage shows each job's coverage; the missing count opens the
  // list of missing targets, and operators can request a run of only those.
  function renderCoverage() {
    fillTable("coverage", state.coverage.map((c) => el("tr", { dataset: { job: c.job }, class: c.missing > 0 ? "incomplete" : null },
      el("td", {}, c.job, el("div", { class: "hint" }, c.targetsDescription)),
      el("td", {}, c.dataDate),
      el("td", { class: "targets" }, num(c.targets)),
      el("td", { class: "current" }, num(c.current)),
      el("td", { class: "missing" }, c.missing > 0
        ? el("a", { href: "#coverage-" + c.job, onclick: (ev) => { ev.preventDefault(); showMissing(c.job); } }, num(c.missing))
        : "0"),
      el("td", { class: "counted" }, since(c.asOf)),
      operator ? el("td", {}, c.onlyMissing && c.missing > 0
        ? el("button", { type: "button", class: "action", dataset: { action: "only-missing", job: c.job }, onclick: () => openForm(c.job, { onlyMissing: true }) }, "Run only missing")
        : null) : null)), "no job has a coverage definition");
  }

  async function showMissing(job, cursor) {
    const box = document.getElementById("coverage-missing");
    try {
      const out = await api("GET", "/v1/coverage/" + encodeURIComponent(job) + "/missing?limit=100" +
        (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
      box.replaceChildren(el("h3", {}, "Missing targets of " + job + " for " + out.dataDate),
        el("p", {}, out.missing.map((t) => el("code", {}, t, " "))),
        out.nextCursor ? el("button", { type: "button", class: "link", onclick: () => showMissing(job, out.nextCursor) }, "Next page") : null);
      box.hidden = false;
    } catch (err) {
      showError("Listing " + job + "'s missing targets", err);
    }
  }

  // How a job stands against its deadline, in words (the badge's colour
  // only repeats them), and why.
  const DEADLINE_STATUS = {
    late: ["late", "the run was not done by its deadline"],
    "at-risk": ["at risk", "the running execution is forecast to end after its deadline"],
    "on-track": ["on track", "nothing says the deadline will be missed"],
  };

  // deadlineCell shows a job's deadline: a badge saying how the job stands
  // (late, at risk, on track), the deadline the run is held to and, while a
  // run has a forecast, when it is forecast to end and how far that is from
  // the deadline. A job without a deadline gets an empty cell.
  function deadlineCell(j) {
    if (!j.deadline) return el("td", { class: "deadline" });
    const status = j.deadlineStatus || "on-track";
    const [words, why] = DEADLINE_STATUS[status] || [status, ""];
    const badge = el("span", { class: "status deadline-status ds-" + status, title: why ? words + ": " + why : null },
      el("span", { class: "sr-only" }, "Deadline status: "), words);
    // With nothing active the deadline is the next one; late then means
    // the last one passed without a completed run.
    let due = "due " + when(j.deadline);
    if (!j.activeRequestId && status === "late") due = "last deadline missed; next " + when(j.deadline);
    else if (Date.parse(j.deadline) <= state.serverNow) due += ", passed";
    const lines = [badge, el("div", { class: "deadline-at" }, due)];
    if (j.forecastDoneAt) {
      const gap = (Date.parse(j.forecastDoneAt) - Date.parse(j.deadline)) / 1000;
      lines.push(el("div", { class: "forecast-gap " + (gap > 0 ? "bad" : "ok") },
        gap === 0 ? "forecast at the deadline" : "forecast " + duration(gap) + (gap > 0 ? " after" : " before") + " the deadline"),
      el("div", { class: "hint forecast" }, "forecast end " + when(j.forecastDoneAt)));
    } else if (j.running) {
      lines.push(el("div", { class: "hint forecast" }, "no forecast yet: the run has no pace"));
    }
    return el("td", { class: "deadline" }, lines);
  }

  function renderJobs() {
    fillTable("jobs", state.jobs.map((j) => {
      const exec = j.lastExecution;
      const keys = j.requiredKeys.length === 0 ? "no key needed"
        : (j.keysConfigured ? "keys configured" : "keys missing: " + j.requiredKeys.join(", "));
      const cells = [
        el("td", {}, el("strong", {}, j.name), el("div", { class: "hint" }, j.chunking)),
        el("td", {}, j.provider || "—", el("div", { class: j.keysConfigured ? "ok" : "bad" }, keys)),
        el("td", {}, j.schedule ? [el("code", {}, j.schedule), el("span", { class: "hint" }, " (cron in " + scheduleZone + ")"), el("div", { class: "hint" }, "next " + when(j.next))] : "not scheduled"),
        el("td", { class: "running" }, j.running ? ["running", el("div", { class: "hint" }, "heartbeat " + age(j.heartbeatAgeSeconds))] : "idle"),
        deadlineColumn ? deadlineCell(j) : null,
        el("td", {}, j.activeRequestId ? requestLink(j.activeRequestId) : "—"),
        el("td", { class: "last-exec" }, exec ? [statusBadge(exec.status), " #" + exec.id,
          el("div", { class: "hint" }, exec.endedAt ? "ended " + when(exec.endedAt) : "started " + when(exec.startedAt)),
          exec.exitMessage ? el("div", { class: "hint" }, exec.exitMessage) : null] : "never ran"),
      ];
      if (operator) {
        const actions = [el("button", { type: "button", class: "action", dataset: { action: "request", job: j.name }, onclick: () => openForm(j.name) }, "Request…")];
        if (j.running && exec && (exec.status === "STARTING" || exec.status === "STARTED")) {
          actions.push(el("button", { type: "button", class: "action warn", dataset: { action: "stop", job: j.name }, onclick: () => stopJob(j.name) }, "Stop"));
        }
        if (abandonable(j)) {
          actions.push(el("button", { type: "button", class: "action danger", dataset: { action: "abandon", execution: exec.id }, onclick: () => abandon(exec.id, j.name) }, "Abandon"));
        }
        cells.push(el("td", { class: "actions" }, actions));
      }
      const data = j.deadlineStatus ? { job: j.name, deadlineStatus: j.deadlineStatus } : { job: j.name };
      return el("tr", { id: "job-" + j.name, dataset: data }, cells);
    }), "no jobs");
  }

  function progressCell(e) {
    if (!e) return el("td", { class: "progress" }, "—");
    const total = Math.max(e.chunksTotal, 0);
    return el("td", { class: "progress" },
      el("progress", { max: total || 1, value: Math.min(e.chunksDone, total || 1) }),
      " " + num(e.chunksDone) + " / " + (total ? num(total) : "?") + " chunks");
  }

  function renderRequests() {
    fillTable("requests", state.requests.map((r) => {
      const e = r.execution;
      return el("tr", { id: "request-" + r.requestId, dataset: { request: r.requestId, job: r.job } },
        el("td", {}, requestLink(r.requestId), el("div", { class: "hint" }, r.source + ", " + since(r.createdAt))),
        el("td", {}, r.job),
        el("td", { class: "req-status" }, statusBadge(r.status)),
        el("td", { class: "exec-status" }, e ? [statusBadge(e.status), " #" + e.id] : "—"),
        progressCell(e),
        el("td", { class: "items" }, e ? num(e.itemsWritten) + " / " + num(e.itemsSkipped) + " / " + num(e.itemsFailed) : "—"),
        el("td", { class: "calls" }, (e ? num(e.externalCalls) : "0") + " of ~" + num(r.estimatedCalls) + (r.maxCalls ? " (max " + num(r.maxCalls) + ")" : "")),
        el("td", {}, budgetText(providerOf(r.job))),
        el("td", { class: "message-cell" }, (e && e.exitMessage) || r.message || ""));
    }), "no requests yet");
  }

  // renderStopped lists the requests whose execution ended STOPPED today
  // (any cause: an operator's stop, a cap, maxCalls, a drain...), counted
  // in the heading; past one page the count says "100+" and the linked
  // list has the rest.
  function renderStopped() {
    const out = state.stopped;
    if (!out) return;
    document.getElementById("stopped-count").textContent = out.requests.length + (out.nextCursor ? "+" : "");
    fillTable("stopped", out.requests.map((r) => {
      const e = r.execution;
      return el("tr", { dataset: { request: r.requestId, job: r.job } },
        el("td", {}, requestLink(r.requestId), el("div", { class: "hint" }, r.source)),
        el("td", {}, r.job),
        el("td", { class: "cause" }, (e && e.stopCause) || "—"),
        el("td", {}, e ? when(e.endedAt) : "—"),
        progressCell(e),
        el("td", { class: "calls" }, (e ? num(e.externalCalls) : "0") + " of ~" + num(r.estimatedCalls) + (r.maxCalls ? " (max " + num(r.maxCalls) + ")" : "")),
        el("td", { class: "message-cell" }, (e && e.exitMessage) || r.message || ""));
    }), "nothing stopped today");
  }

  function renderWorkers() {
    const jobOf = {};
    for (const r of allRequests()) jobOf[r.requestId] = r.job;
    fillTable("workers", state.workers.map((w) => el("tr", { dataset: { worker: w.id } },
      el("td", {}, el("code", {}, w.id)),
      el("td", {}, el("span", { class: w.alive ? "ok" : "bad" }, w.alive ? "alive" : "dead"), " (" + w.status + ")"),
      el("td", {}, since(w.heartbeatAt)),
      el("td", {}, w.configuredKeys.length ? w.configuredKeys.join(", ") : "none"),
      el("td", {}, w.activeRequestIds.length ? w.activeRequestIds.map((id, i) => [i ? ", " : "", (jobOf[id] || "?") + " ", requestLink(id)]) : "idle"),
      el("td", {}, w.version))), "no workers registered");
  }

  // capNote says where a provider's cap comes from: the api's own setting
  // when no live worker reported one, or, when live workers enforce
  // different caps, which worker reported the one shown and every cap.
  function capNote(p) {
    if (p.capSource === "api") return el("div", { class: "hint" }, "api setting: no live worker reported a cap");
    if (!p.capReportedBy) return null;
    return el("div", { class: "hint cap-disagree" }, "workers disagree: highest from ", el("code", {}, p.capReportedBy), " (",
      (p.capsByWorker || []).map((c) => c.workerId + " " + num(c.dailyCap)).join(", "), ")");
  }

  function renderProviders() {
    fillTable("providers", state.providers.map((p) => el("tr", { dataset: { provider: p.provider } },
      el("td", {}, p.provider), el("td", {}, p.jobs.join(", ")), el("td", {}, num(p.usedToday)),
      el("td", { class: "cap" }, p.dailyCap === null ? "no cap" : num(p.dailyCap), capNote(p)),
      el("td", { class: "remaining" }, p.remaining === null ? "—" : num(p.remaining)))), "no providers");
  }

  function renderAlerts(out) {
    document.getElementById("alerts-date").textContent = out.date ? "of " + out.date : "";
    fillTable("alerts", out.alerts.map((a) => el("tr", {},
      el("td", {}, el("span", { class: "severity sev-" + a.severity }, a.severity)),
      el("td", {}, a.companyName || a.corpCode, a.companyName ? el("div", { class: "hint" }, a.corpCode) : null),
      el("td", {}, a.rule),
      el("td", {}, el("code", {}, JSON.stringify(a.values))))), "no alerts: the rules job has not written any");
  }

  function renderAudit(out) {
    fillTable("audit", out.events.map((e) => el("tr", {},
      el("td", {}, new Date(e.at).toLocaleString()), el("td", {}, e.actor), el("td", {}, e.client),
      el("td", {}, e.action), el("td", {}, e.target), el("td", {}, e.detail))), "nothing recorded yet");
  }

  // ---- request detail (#request-N) -------------------------------------

  async function refreshDetail() {
    const m = /^#request-(\d+)$/.exec(location.hash);
    const section = document.getElementById("request-detail");
    document.querySelectorAll("tr.highlight").forEach((tr) => tr.classList.remove("highlight"));
    if (!m) { section.hidden = true; return; }
    const row = document.getElementById("request-" + m[1]);
    if (row) row.classList.add("highlight");
    try {
      const r = await api("GET", "/v1/requests/" + m[1]);
      const e = r.execution;
      document.getElementById("detail-id").textContent = r.requestId;
      const rows = [
        ["Job", r.job], ["Status", statusBadge(r.status)], ["Source", r.source],
        ["Params", el("code", {}, JSON.stringify(r.params))], ["Estimated calls", num(r.estimatedCalls)],
        ["Created", when(r.createdAt)], ["Worker", r.workerId || "—"], ["Message", r.message || "—"],
      ];
      // The chain of one instance: which execution this request resumes (and
      // why, for an automatic resume), and the instance's executions so far.
      if (r.resumesExecutionId) {
        rows.push(["Resumes", "execution #" + r.resumesExecutionId +
          (r.source === "resume" ? " (automatic, after " + (r.resumeCause || "a stop") + ")" : "")]);
      }
      // The instance's figures are its executions' added up; the
      // execution's below are its own (a resume's start after the chunks
      // committed before it).
      if (r.instance) {
        rows.push(["Instance", "#" + r.instance.id + ": " + num(r.instance.executions) + " execution(s), " +
          num(r.instance.chunksDone) + " of " + num(r.instance.chunksPlanned) + " chunks, written / skipped / failed " + num(r.instance.itemsWritten) + " / " +
          num(r.instance.itemsSkipped) + " / " + num(r.instance.itemsFailed) + ", " + num(r.instance.externalCalls) + " calls"]);
      }
      if (e) {
        rows.push(["Execution", [statusBadge(e.status), " #" + e.id]],
          ["Chunks", num(e.chunksDone) + " / " + num(e.chunksTotal) + (e.chunksBefore ? " (" + num(e.chunksBefore) + " committed before it)" : "")],
          ["Items written / skipped / failed", num(e.itemsWritten) + " / " + num(e.itemsSkipped) + " / " + num(e.itemsFailed)],
          ["External calls", num(e.externalCalls)], ["Provider budget left", budgetText(providerOf(r.job))],
          ["Last update", since(e.lastUpdated)], ["Exit message", e.exitMessage || "—"]);
      }
      document.getElementById("detail-body").replaceChildren(el("dl", {}, rows.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
      section.hidden = false;
      clearError("detail");
    } catch (err) {
      showError("Loading request " + m[1], err, "detail");
    }
  }

  // ---- actions (operators) --------------------------------------------

  async function stopJob(job) {
    try {
      const out = await api("POST", "/v1/jobs/" + encodeURIComponent(job) + "/stop");
      notice("Stopping " + job + ": execution " + out.executionId + " is " + out.status + "; it becomes STOPPED at the next chunk boundary.");
    } catch (err) {
      showError("Stopping " + job, err);
    }
    refresh();
  }

  async function abandon(executionID, job) {
    try {
      const out = await api("POST", "/v1/executions/" + encodeURIComponent(executionID) + "/abandon");
      notice("Execution " + out.id + " of " + job + " is " + out.status + "; a new request resumes from its last commit.");
    } catch (err) {
      showError("Abandoning execution " + executionID, err);
    }
    refresh();
  }

  // openForm builds the request form from the job's params schema: a text
  // field per string (lists comma-separated), a checkbox per boolean, a
  // number field per integer, prefilled with the job's example (and the
  // values of preset, such as onlyMissing from the coverage table).
  async function openForm(job, preset) {
    let detail;
    try {
      detail = await api("GET", "/v1/jobs/" + encodeURIComponent(job));
    } catch (err) {
      showError("Loading " + job + "'s form", err);
      return;
    }
    const schema = detail.paramsSchema || {};
    const props = schema.properties || {};
    const required = new Set(schema.required || []);
    const example = Object.assign({}, detail.example || {}, preset || {});
    const fields = Object.entries(props).map(([name, prop]) => {
      const id = "field-" + name;
      const hint = prop.description || "";
      const ex = example[name];
      const req = required.has(name);
      // A Go slice is "nullable": its type is ["array", "null"].
      const type = Array.isArray(prop.type) ? prop.type.find((x) => x !== "null") : prop.type;
      if (type === "boolean") {
        return el("label", { class: "check" }, el("input", { type: "checkbox", id, name, dataset: { kind: "boolean" }, checked: ex === true }), " " + name, el("small", {}, " " + hint));
      }
      const kind = type === "array" ? "array" : (type === "integer" || type === "number" ? "number" : "string");
      const value = Array.isArray(ex) ? ex.join(", ") : (ex === undefined ? "" : String(ex));
      const input = el("input", {
        type: kind === "number" ? "number" : "text", id, name, value, required: req,
        pattern: kind === "string" && prop.pattern ? prop.pattern : null,
        placeholder: kind === "array" ? "comma-separated" : null,
        dataset: { kind },
      });
      return el("div", { class: "field" },
        el("label", { for: id }, name, req ? " *" : "", el("small", {}, " " + hint + (kind === "array" ? " (comma-separated)" : ""))), input);
    });
    document.getElementById("form-fields").replaceChildren(...(fields.length ? fields : [el("p", { class: "hint" }, "This job takes no params.")]));
    document.getElementById("form-job").textContent = job;
    document.getElementById("form-description").textContent = detail.description;
    document.getElementById("field-maxCalls").value = "";
    document.getElementById("field-confirmPurge").checked = false;
    state.form = { job, provider: detail.provider, estimated: null };
    formChanged();
    const panel = document.getElementById("request-panel");
    panel.hidden = false;
    panel.scrollIntoView({ block: "nearest" });
  }

  function formBody() {
    const params = {};
    for (const input of document.querySelectorAll("#form-fields input")) {
      const kind = input.dataset.kind;
      if (kind === "boolean") {
        if (input.checked) params[input.name] = true;
      } else if (kind === "array") {
        const items = input.value.split(/[\s,]+/).filter(Boolean);
        if (items.length) params[input.name] = items;
      } else if (input.value.trim() !== "") {
        params[input.name] = kind === "number" ? Number(input.value) : input.value.trim();
      }
    }
    const body = { params };
    const maxCalls = document.getElementById("field-maxCalls").value.trim();
    if (maxCalls !== "") body.maxCalls = Number(maxCalls);
    if (document.getElementById("field-confirmPurge").checked) body.confirmPurge = true;
    return body;
  }

  // formChanged forgets the estimate: the run button needs a fresh one for
  // exactly the values it will send.
  function formChanged() {
    if (!state.form) return;
    state.form.estimated = null;
    document.getElementById("submit-request").disabled = true;
    document.getElementById("estimate-result").textContent = "Estimate the calls before requesting the run.";
    document.getElementById("form-error").replaceChildren();
    document.querySelectorAll("#request-form .invalid").forEach((n) => n.classList.remove("invalid"));
  }

  function formError(context, err) {
    document.getElementById("form-error").replaceChildren(...errorNode(context, err));
    for (const e of (err.problem && err.problem.errors) || []) {
      const m = /^body\.(?:params\.)?([A-Za-z]+)/.exec(e.location || "");
      const input = m && document.getElementById("field-" + m[1]);
      if (input) input.classList.add("invalid");
    }
  }

  async function estimate() {
    const f = state.form;
    const body = formBody();
    formChanged();
    try {
      const out = await api("POST", "/v1/jobs/" + encodeURIComponent(f.job) + "/estimate", body);
      f.estimated = JSON.stringify(body);
      const p = state.providers.find((x) => x.provider === f.provider);
      document.getElementById("estimate-result").replaceChildren(
        el("strong", { id: "estimated-calls" }, num(out.estimatedCalls)),
        " external call" + (out.estimatedCalls === 1 ? "" : "s") + " estimated" + (p ? " · " + budgetText(p) + " left today" : "") + ".");
      document.getElementById("submit-request").disabled = false;
    } catch (err) {
      document.getElementById("estimate-result").textContent = "";
      formError("Estimating " + f.job, err);
    }
  }

  // showFollowed says what became of the request the form sent: QUEUED,
  // RUNNING, then DONE or FAILED with its execution's status and message.
  // refresh() re-reads it at every poll until it ends.
  function showFollowed(r) {
    const f = state.form;
    const exec = r.execution;
    let text = " is " + r.status;
    if (exec && (r.status === "DONE" || r.status === "FAILED")) text += " (execution " + exec.id + " " + exec.status + ")";
    else if (exec) text += " (execution " + exec.id + ", " + num(exec.chunksDone) + " of " + num(exec.chunksTotal) + " chunks)";
    if (f.followed.resumes) text += ", resuming execution " + f.followed.resumes;
    text += ".";
    if (r.message && (r.status === "DONE" || r.status === "FAILED")) text += " " + r.message;
    document.getElementById("estimate-result").replaceChildren("Requested: ", requestLink(r.requestId), text);
    if (r.status === "DONE" || r.status === "FAILED") f.followed = null;
  }

  async function followRequest() {
    const f = state.form;
    if (!f || !f.followed) return;
    const id = f.followed.id;
    const r = await api("GET", "/v1/requests/" + encodeURIComponent(id));
    if (f.followed && f.followed.id === id) showFollowed(r);
  }

  async function submitRequest(event) {
    event.preventDefault();
    const f = state.form;
    const body = formBody();
    if (f.estimated !== JSON.stringify(body)) { estimate(); return; }
    document.getElementById("submit-request").disabled = true;
    try {
      const out = await api("POST", "/v1/jobs/" + encodeURIComponent(f.job) + "/requests", body);
      document.getElementById("form-error").replaceChildren();
      f.followed = { id: out.requestId, resumes: out.resumesExecutionId };
      showFollowed(out);
      f.estimated = null;
    } catch (err) {
      document.getElementById("submit-request").disabled = false;
      formError("Requesting " + f.job, err);
    }
    refresh();
  }

  // ---- start ----------------------------------------------------------

  if (operator) {
    const form = document.getElementById("request-form");
    form.addEventListener("input", formChanged);
    form.addEventListener("submit", submitRequest);
    document.getElementById("estimate-button").addEventListener("click", estimate);
    document.getElementById("close-form").addEventListener("click", () => {
      document.getElementById("request-panel").hidden = true;
      state.form = null;
    });
  }
  window.addEventListener("hashchange", refreshDetail);
  refresh();
  setInterval(refresh, POLL_MS);
})();
