// Ballast operator console: draws what /ballast/api/* returns with Plotly, and keeps it live.
// The page itself is rendered by plugin.py; this script polls (every 2 s while a plan runs).
(() => {
  "use strict";
  const BOOT = JSON.parse(document.getElementById("boot").textContent);
  const ROOT = BOOT.root, AF = BOOT.airflow;
  const S = {
    job: BOOT.job, operator: BOOT.operator, window: BOOT.window, jobs: BOOT.jobs,
    mapVersion: null, metric: "load", pinnedPlan: BOOT.plan || null, plan: null, plans: [], binmap: null,
    ev: { level: "", kind: "", q: "" },
  };
  const C = { ok: "#15803d", warn: "#d97706", bad: "#b91c1c", info: "#1d4ed8", muted: "#9ca3af",
    accent: "#0f766e", input: "#2563eb", processed: "#0f766e", bytes: "#7c3aed" };
  const STATUS_BADGE = { running: "ok", stale: "warn", stopped: "bad", "not started": "muted",
    applied: "ok", completed: "ok", "in flight": "warn", waiting: "warn", emitting: "warn", planned: "info", pending: "muted",
    rejected: "bad", superseded: "bad", failed: "bad", info: "info", warning: "warn", error: "bad",
    scale_up: "info", scale_down: "info", rebalance: "info", split: "info", tune: "info", no_change: "muted" };
  const STEP_COLOR = { applied: C.ok, "in flight": C.warn, rejected: C.bad, superseded: C.bad, pending: C.muted };
  // light = little, dark = much (plotly's named YlOrRd/Purples run the other way)
  const LOAD_SCALE = [[0, "#fff7ec"], [0.2, "#fdd49e"], [0.45, "#fc8d59"], [0.7, "#d7301f"], [1, "#7f0000"]];
  const BYTES_SCALE = [[0, "#f2f0f7"], [0.4, "#bcbddc"], [0.7, "#807dba"], [1, "#3f007d"]];
  const PLOT = { displaylogo: false, responsive: true,
    modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d", "toggleSpikelines", "hoverCompareCartesian"] };
  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------------ formatting
  const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const num = (v, d = 0) => (v === null || v === undefined || Number.isNaN(v) ? "–" :
    Number(v).toLocaleString(undefined, { maximumFractionDigits: d, minimumFractionDigits: 0 }));
  const bytes = (v) => {
    if (v === null || v === undefined) return "–";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0, x = Number(v);
    while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
    return `${x.toFixed(i ? 1 : 0)} ${u[i]}`;
  };
  const ms = (v) => (v === null || v === undefined ? "–" : v >= 10000 ? `${(v / 1000).toFixed(1)} s` : `${num(v)} ms`);
  const secs = (v) => (v === null || v === undefined ? "–" : v >= 120 ? `${(v / 60).toFixed(1)} min` : `${v.toFixed(1)} s`);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  // Plotly shows date strings as written: hand it local wall-clock time
  const loc = (iso) => {
    if (!iso) return null;
    const d = new Date(iso);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  };
  const hms = (iso) => (iso ? `<span title="${esc(iso)}">${new Date(iso).toLocaleTimeString()}</span>` : "–");
  const when = (iso) => {
    if (!iso) return "–";
    const d = new Date(iso), today = new Date().toDateString() === d.toDateString();
    return `<span title="${esc(iso)}">${today ? "" : d.toLocaleDateString() + " "}${d.toLocaleTimeString()}</span>`;
  };
  const badge = (s, text) => `<span class="badge ${STATUS_BADGE[s] || "muted"}">${esc(text ?? s)}</span>`;
  const runLink = (run) => (run ? `<a target="_top" href="${esc(run.url)}" title="${esc(run.dag_id)} ${esc(run.run_id)}">run ↗</a>` : "");
  const wLabel = (w) => `w${w}`;

  // --------------------------------------------------------------------- fetching
  async function api(path, params = {}) {
    const u = new URL(ROOT + path, location.origin);
    for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") u.searchParams.set(k, v);
    const r = await fetch(u, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (r.status === 401 || r.status === 403) {
      live("err", r.status === 401 ? "logged out: reload the page to log in" : "not allowed");
      throw new Error(`HTTP ${r.status}`);
    }
    if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
    return r.json();
  }
  const jobPath = (what) => `/api/jobs/${encodeURIComponent(S.job)}/${what}`;
  function live(state, text) {
    const el = $("live");
    el.className = `live ${state === "ok" ? "" : state}`;
    el.textContent = text || (state === "ok" ? "live" : state);
  }
  const draw = (id, traces, layout) => Plotly.react($(id), traces, {
    margin: { l: 56, r: 56, t: 30, b: 36 }, font: { family: "system-ui, sans-serif", size: 12 },
    legend: { orientation: "h", y: 1.14, x: 0 }, hovermode: "x unified", ...layout,
  }, PLOT);

  // ------------------------------------------------------------------------ jobs
  function renderJobs(jobs) {
    S.jobs = jobs;
    const rows = jobs.map((j) => {
      const p = j.open_plan;
      const cap = j.executors !== null || j.capacity ? `${num(j.executors)} / ${num(j.capacity)}` : "–";
      return `<tr class="clickable${j.job === S.job ? " selected" : ""}" data-job="${esc(j.job)}" data-operator="${esc(j.operator)}">
        <td><a href="${esc(ROOT)}/?job=${encodeURIComponent(j.job)}&operator=${encodeURIComponent(j.operator)}&window=${S.window}">${esc(j.job)}</a><div class="sub">${esc(j.operator)}</div></td>
        <td><span data-field="status">${badge(j.status)}</span>${j.degraded ? ` <span class="badge warn" data-field="degraded" title="a worker's local cache failed and was rebuilt from the durable state: the job runs on, slower">degraded</span>` : ""}${(j.attention || []).length ? ` <span class="badge ${j.attention.some((a) => a.level === "error") ? "bad" : "warn"}" title="${esc(j.attention.map((a) => a.text).join("\n"))}">⚠ ${j.attention.length}</span>` : ""}<div class="sub">${j.heartbeat_age_s === null ? "no heartbeat" : secs(j.heartbeat_age_s) + " ago"}</div></td>
        <td>${esc(j.host || "–")}<div class="sub">${j.pid ? "pid " + j.pid : ""}</div></td>
        <td class="num">${num(j.epoch)}</td><td class="num">${num(j.workers)}</td><td class="num">${num(j.map_version)}</td>
        <td class="num">${cap}</td><td class="num">${num(j.input_rate)}</td><td class="num">${num(j.backlog)}</td>
        <td class="num">${ms(j.batch_ms)}</td>
        <td>${p ? `${badge(p.status)} ${p.applied}/${p.steps} <code>${esc(p.workers)}</code>` : "–"}</td></tr>`;
    });
    $("jobs").tBodies[0].innerHTML = rows.join("") || `<tr><td colspan="11" class="muted">No job has started yet.</td></tr>`;
    const j = jobs.find((x) => x.job === S.job && x.operator === S.operator);
    if (j) renderFacts(j);
    renderHandover(j ? j.handover : null);
  }
  function renderFacts(j) {
    const fact = (label, value) => `<div class="fact"><b>${value}</b><span>${label}</span></div>`;
    const bounds = j.min_workers !== null ? ` <span class="sub">(${j.min_workers}–${j.max_workers})</span>` : "";
    $("job-facts").innerHTML = [
      fact("status", badge(j.status)),
      fact("heartbeat", j.heartbeat_age_s === null ? "–" : secs(j.heartbeat_age_s) + " ago"),
      fact("host", esc(j.host || "–")),
      fact("epoch", num(j.epoch)),
      fact("workers (W)", num(j.workers) + bounds),
      fact("map version", num(j.map_version)),
      fact("executors / capacity", `${num(j.executors)} / ${num(j.capacity)}`),
      fact("input rows/s", num(j.input_rate)),
      fact("backlog rows", num(j.backlog)),
      fact("batch time", ms(j.batch_ms)),
      fact(`trigger · max records/epoch <span class="sub">(settings)</span>`,
        `${ms(j.trigger_ms)} · ${j.max_records_per_epoch ? num(j.max_records_per_epoch) : "no cap"}`),
      fact("processor version", j.version ? `v${esc(j.version.version)} <span class="sub">${esc(j.version.ref)}</span>` : "as started"),
      fact(`dead letters <span class="sub">(${esc(j.job)}.dlq)</span>`, num(j.dead_letters)),
      fact("bins (B)", num(j.bins)),
    ].join("");
    $("attention").innerHTML = (j.attention || []).map((a) => `<li class="${esc(a.level)}">${esc(a.text)}</li>`).join("");
    // where else to look: Spark's UI of the driver, the job's DAG runs in Airflow, its topics
    const ext = (href, text, title = "") => `<a target="_top" href="${esc(href)}" title="${esc(title)}">${esc(text)} ↗</a>`;
    const spark = j.spark_ui ? ext(j.spark_ui, "Spark UI", "the driver's Spark UI")
      : `<span class="muted" title="start the job with spark_ui: true (jobs file) to get its Spark UI">Spark UI off</span>`;
    const dags = (j.dags || []).map((d) => ext(d.url, `${d.name} runs`, `ballast_${d.name}__${j.job} in Airflow`));
    const topics = (j.topics || []).map((t) => `<span class="topic" data-role="${esc(t.role)}">${esc(t.role)} ${t.url
      ? ext(t.url, t.topic) : `<code>${esc(t.topic)}</code>`}</span>`);
    $("job-links").innerHTML = `${[spark, ...dags].join(" · ")}<div class="sub">topics: ${topics.join(" · ")}</div>`;
  }

  // ---------------------------------------------------------------------- series
  function planShapes(plans) {
    return plans.map((p) => ({ type: "rect", xref: "x", yref: "paper", x0: loc(p.start), x1: loc(p.end), y0: 0, y1: 1,
      fillcolor: p.status === "failed" ? "rgba(185,28,28,.10)" : "rgba(15,118,110,.10)", line: { width: 0 }, layer: "below" }));
  }
  function renderSeries(d) {
    // the window, or less when the job is younger than it (a fresh job is not squeezed into a corner)
    const first = d.t.length ? Math.max(new Date(d.since), new Date(d.t[0]) - 30e3) : new Date(d.since);
    const t = d.t.map(loc), shapes = planShapes(d.plans), range = [loc(new Date(first).toISOString()), loc(d.now)];
    const xaxis = { type: "date", range, showgrid: false };
    const shaded = d.plans.length ? " · shaded: migration plans" : "";
    draw("chart-rate", [
      { x: t, y: d.input_rate, name: "arriving rows/s", type: "scatter", mode: "lines", line: { color: C.input, width: 2 } },
      { x: t, y: d.processed_rate, name: "processed rows/s", type: "scatter", mode: "lines", line: { color: C.processed, width: 2, dash: "dot" } },
      { x: t, y: d.workers, name: "workers (W)", yaxis: "y2", type: "scatter", mode: "lines", line: { color: "#6b7280", shape: "hv", width: 1.5 } },
    ], { title: { text: `Input rate and workers${shaded}`, font: { size: 13 }, x: 0 }, xaxis, shapes,
      yaxis: { title: "rows/s", rangemode: "tozero" },
      yaxis2: { title: "W", overlaying: "y", side: "right", rangemode: "tozero", dtick: 1, showgrid: false } });
    draw("chart-backlog", [
      { x: t, y: d.backlog, name: "backlog (max per point)", type: "scatter", mode: "lines", fill: "tozeroy", line: { color: C.warn } },
    ], { title: { text: "Backlog (rows behind the input)", font: { size: 13 }, x: 0 }, xaxis, shapes, showlegend: false,
      yaxis: { title: "rows", rangemode: "tozero" } });
    draw("chart-batch", [
      { x: t, y: d.batch_ms, name: "batch (mean)", type: "scatter", mode: "lines", line: { color: C.info } },
      { x: t, y: d.batch_ms_max, name: "batch (max)", type: "scatter", mode: "lines", line: { color: C.info, width: 1, dash: "dot" } },
      { x: t, y: d.migration_ms, name: "migration pause", type: "bar", marker: { color: C.bad }, opacity: 0.7 },
    ], { title: { text: "Batch time", font: { size: 13 }, x: 0 }, xaxis, shapes, yaxis: { title: "ms", rangemode: "tozero" } });
  }

  // ------------------------------------------------------------ critical path
  // what holds epochs back (docs/tracing.md): CP per epoch of the largest activities, and the
  // newest epoch's timeline with its critical activities in the alarm colour
  function renderCritical(d) {
    $("bottleneck").textContent = d.bottleneck;
    const palette = ["#b91c1c", "#0f766e", "#1d4ed8", "#a16207", "#7c3aed", "#be185d", "#9ca3af"];
    draw("chart-critical", d.names.map((n, i) => ({ x: d.epochs, y: d.shares[n].map((v) => 100 * v), name: n,
      type: "bar", marker: { color: palette[i % palette.length] },
      hovertemplate: `%{y:.0f}% of epoch %{x}'s critical path<extra>${n}</extra>` })),
      { barmode: "stack", title: { text: "Critical participation per epoch", font: { size: 13 }, x: 0 },
        legend: { orientation: "v", x: 1.02, y: 1 }, margin: { l: 56, r: 190, t: 30, b: 36 }, hovermode: "closest",
        xaxis: { title: "epoch", dtick: d.epochs.length > 20 ? 5 : 1 }, yaxis: { title: "% of the critical path", range: [0, 100] } });
    const lanes = [...new Set(d.timeline.map((a) => a.timeline))];
    draw("chart-timeline", [false, true].map((crit) => {
      const acts = d.timeline.filter((a) => (a.cp > 0) === crit);
      return { type: "bar", orientation: "h", y: acts.map((a) => a.timeline), x: acts.map((a) => a.ms), base: acts.map((a) => a.start_ms),
        text: acts.map((a) => a.kind), textposition: "inside", insidetextanchor: "middle",
        name: crit ? "on the critical path" : "off it (finished early, then waited)",
        marker: { color: crit ? C.bad : "#cbd5e1" },
        customdata: acts.map((a) => [a.kind, (100 * a.cp).toFixed(0)]),
        hovertemplate: "%{customdata[0]}: %{base:.0f}–%{x:.0f} ms, CP %{customdata[1]}%<extra>%{y}</extra>" };
    }), { title: { text: d.latest_epoch === null ? "Timeline" : `Epoch ${d.latest_epoch}: timeline`, font: { size: 13 }, x: 0 },
      barmode: "overlay", xaxis: { title: "ms since the epoch's start" }, hovermode: "closest",
      legend: { orientation: "h", x: 0, y: -0.3 }, margin: { l: 70, r: 20, t: 30, b: 70 },
      yaxis: { categoryorder: "array", categoryarray: lanes.slice().reverse() } });
  }

  // --------------------------------------------------------------------- bin map
  function renderBinmap(d) {
    S.binmap = d;
    const sel = $("map-version");
    if (!d.map) {
      $("map-sub").textContent = "no routing map recorded yet";
      Plotly.purge($("heatmap")); $("heatmap").dataset.bins = "0";
      return;
    }
    const m = d.map, B = m.bins, W = m.workers;
    const opts = d.versions.map((v, i) => `<option value="${i === 0 ? "" : v.version}"${(S.mapVersion ?? d.versions[0].version) === v.version ? " selected" : ""}>v${v.version}${i === 0 ? " (current)" : ""} · ${v.workers} W · from epoch ${v.epoch}${v.plan_id ? " · step " + v.step : ""}</option>`);
    if (sel.dataset.sig !== opts.join("")) { sel.innerHTML = opts.join(""); sel.dataset.sig = opts.join(""); }
    const w = d.window;
    $("map-sub").textContent = `v${m.version}${m.current ? " (current)" : ""}: ${B} bins on ${W} workers · load over epochs ${w.lo_epoch}–${w.hi_epoch} (${w.epochs} with metrics)`;
    const metric = S.metric, val = metric === "load" ? d.load : d.bytes;
    const z = [], text = [];
    for (let k = 0; k < W; k++) { z.push(new Array(B).fill(null)); text.push(new Array(B).fill("")); }
    m.assignment.forEach((wk, b) => {
      z[wk][b] = val[b];
      const pend = d.pending[String(b)];
      text[wk][b] = `bin ${b} on ${wLabel(wk)}<br>load ${num(d.load[b], 1)} records/epoch<br>state ${bytes(d.bytes[b])}, ${num(d.keys[b])} keys` +
        (pend ? `<br><b>moves to ${wLabel(pend.to)} in step ${pend.step}</b>${pend.emitted ? " (sent)" : ""}` : "");
    });
    const heat = { type: "heatmap", z, text, x: [...Array(B).keys()], y: [...Array(W).keys()].map(wLabel),
      hovertemplate: "%{text}<extra></extra>", hoverongaps: false, xgap: B <= 128 ? 1 : 0, ygap: 3,
      colorscale: metric === "load" ? LOAD_SCALE : BYTES_SCALE, zmin: 0,
      colorbar: { title: { text: metric === "load" ? "records/epoch" : "bytes", side: "right" }, thickness: 12 } };
    const traces = [heat];
    const pend = Object.entries(d.pending);
    if (pend.length) traces.push({ type: "scatter", mode: "markers", name: "moving here (open plan)",
      x: pend.map(([b]) => Number(b)), y: pend.map(([, p]) => wLabel(p.to)),
      text: pend.map(([b, p]) => `bin ${b} → ${wLabel(p.to)} in step ${p.step}${p.emitted ? " (sent)" : ""}`),
      hovertemplate: "%{text}<extra></extra>", marker: { symbol: "square-open", size: 9, color: C.accent, line: { width: 2 } } });
    if (d.hot.length) traces.push({ type: "scatter", mode: "markers", name: `hot bin (≥ ${d.hot_factor}× mean)`,
      x: d.hot.map((h) => h.bin), y: d.hot.map((h) => wLabel(h.worker)),
      text: d.hot.map((h) => `hot bin ${h.bin}: ${num(h.x_mean, 1)}× the mean bin`), hovertemplate: "%{text}<extra></extra>",
      marker: { symbol: "star", size: 9, color: "#111827" } });
    $("heatmap").style.height = `${Math.max(170, 70 + 34 * W)}px`;
    draw("heatmap", traces, { hovermode: "closest", margin: { l: 44, r: 20, t: 26, b: 34 },
      xaxis: { title: "bin", range: [-0.5, B - 0.5], showgrid: false, zeroline: false },
      yaxis: { autorange: "reversed", showgrid: false }, legend: { orientation: "h", y: 1.2, x: 0 } });
    $("heatmap").dataset.bins = String(B);
    $("heatmap").dataset.workers = String(W);
    $("heatmap").dataset.version = String(m.version);

    const pw = d.per_worker;
    draw("workers", [
      { type: "bar", name: "load (records/epoch)", x: pw.map((p) => wLabel(p.worker)), y: pw.map((p) => p.load),
        marker: { color: C.warn }, offsetgroup: 1,
        text: pw.map((p) => `${p.bins} bins${p.busy === null ? "" : ", busy " + Math.round(100 * p.busy) + "%"}`), textposition: "auto",
        hovertemplate: "%{x}: %{y:,.0f} records/epoch, %{text}<extra></extra>" },
      { type: "bar", name: "state bytes", x: pw.map((p) => wLabel(p.worker)), y: pw.map((p) => p.bytes), yaxis: "y2",
        marker: { color: C.bytes, opacity: 0.55 }, offsetgroup: 2, hovertemplate: "%{x}: %{y:.3s}B<extra></extra>" },
    ], { title: { text: `Load per worker${d.skew ? ` · max/mean ${d.skew.toFixed(2)}` : ""}`, font: { size: 13 }, x: 0 },
      hovermode: "closest", barmode: "group", yaxis: { title: "records/epoch", rangemode: "tozero" },
      yaxis2: { title: "bytes", overlaying: "y", side: "right", rangemode: "tozero", showgrid: false } });
    $("hot").innerHTML = d.hot.length
      ? `<table class="grid"><tr><th>bin</th><th>worker</th><th class="num">records/epoch</th><th class="num">× mean</th><th class="num">share</th><th class="num">state</th></tr>${d.hot.map((h) =>
        `<tr><td>${h.bin}${d.pending[String(h.bin)] ? " <span class='badge info'>moving</span>" : ""}</td><td>${wLabel(h.worker)}</td><td class="num">${num(h.load, 1)}</td>
        <td class="num">${num(h.x_mean, 1)}</td><td class="num">${(100 * h.share).toFixed(1)}%</td><td class="num">${bytes(h.bytes)}</td></tr>`).join("")}</table>`
      : `<p class="muted">No bin carries ${d.hot_factor}× the mean bin's load in this window.</p>`;
  }

  // ----------------------------------------------------------------------- plans
  function renderPlans(list) {
    S.plans = list;
    $("recent-plans").innerHTML = `<tr><th>created</th><th>plan</th><th>status</th><th>strategy</th><th>W</th><th class="num">steps</th>
      <th class="num">pause predicted / measured</th><th class="num">duration predicted / measured</th><th class="num">moved</th><th>source</th><th></th></tr>` + (list.map((p) =>
      `<tr class="clickable${S.plan && S.plan.plan_id === p.plan_id ? " selected" : ""}" data-plan="${esc(p.plan_id)}">
       <td>${when(p.created_at)}</td><td><code>${esc(p.plan_id)}</code></td><td>${badge(p.status)}</td><td>${esc(p.strategy)}</td>
       <td><code>${esc(p.workers)}</code></td><td class="num">${p.applied}/${p.steps}</td>
       <td class="num">${ms(p.pause_predicted_ms)} / ${ms(p.pause_measured_ms)}</td>
       <td class="num">${ms(p.duration_predicted_ms)} / ${ms(p.duration_measured_ms)}</td><td class="num">${bytes(p.bytes_moved)}</td>
       <td>${esc(p.source || "")}</td><td>${runLink(p.run)}</td></tr>`).join("") || `<tr><td colspan="11" class="muted">No plan yet.</td></tr>`);
  }
  // the cost model's track record: whether to trust a dry run's figures
  function renderAccuracy(a) {
    const one = (name, q) => q.plans
      ? `${name}: measured ÷ predicted median <b>${num(q.median_ratio, 2)}×</b>, typical error <b>${Math.round(100 * q.median_abs_error)}%</b> (${q.plans} plan${q.plans > 1 ? "s" : ""})`
      : `${name}: no finished plan to compare yet`;
    $("plan-accuracy").innerHTML = `Cost model over recent plans · ${one("pause", a.pause)} · ${one("duration", a.duration)}`;
  }
  function currentPlanId() {
    if (S.pinnedPlan) return S.pinnedPlan;
    const j = S.jobs.find((x) => x.job === S.job && x.operator === S.operator);
    if (j && j.open_plan) return j.open_plan.plan_id;
    return S.plans.length ? S.plans[0].plan_id : null;
  }
  function renderPlan(p) {
    S.plan = p;
    if (!p) {
      $("plan-detail").innerHTML = `<p class="muted">No migration plan for this job yet. “Plan a migration…” opens the trigger form.</p>`;
      $("plan-steps").innerHTML = ""; Plotly.purge($("plan-timeline")); Plotly.purge($("plan-pause"));
      $("plan-charts").hidden = true; $("plan-sub").textContent = ""; return;
    }
    $("plan-charts").hidden = false;
    const pct = p.steps ? Math.round((100 * p.applied) / p.steps) : 0;
    $("plan-sub").textContent = p.open ? "live · refreshed every 2 s" : "";
    $("plan-detail").innerHTML = `<div class="plan-head" data-plan="${esc(p.plan_id)}" data-status="${esc(p.status)}">
      <span><code>${esc(p.plan_id)}</code> ${badge(p.status)}</span>
      <span>${esc(p.strategy)} · ${esc(p.emit_mode || "")} · W <b>${esc(p.workers)}</b> · ${p.steps} steps from map v${p.source_map_version}</span>
      <span><span class="progress"><div style="width:${pct}%"></div></span> ${p.applied}/${p.steps} applied</span>
      <span>pause (applied steps) predicted <b>${ms(p.pause_predicted_ms)}</b> · measured <b>${ms(p.pause_measured_ms)}</b></span>
      <span>duration predicted <b>${ms(p.duration_predicted_ms)}</b> · measured <b>${p.open ? `${secs(p.wall_s)} so far` : ms(p.duration_measured_ms)}</b></span>
      <span>moved ${bytes(p.bytes_moved)}, ${num(p.keys_moved)} keys</span>
      <span>${esc(p.source || "")} ${runLink(p.run)}</span></div>
      ${p.reason ? `<div class="sub">reason: ${esc(p.reason)}</div>` : ""}`;
    const rows = p.step_rows, label = (s) => `step ${s.step}`;
    const nowIso = new Date().toISOString();
    const started = rows.filter((s) => s.emitted_at);
    const bars = { type: "bar", orientation: "h", y: started.map(label),
      base: started.map((s) => loc(s.emitted_at)),
      x: started.map((s) => Math.max(50, new Date(s.checkpoint_at || nowIso) - new Date(s.emitted_at))),
      marker: { color: started.map((s) => STEP_COLOR[s.status] || C.muted) }, name: "emitted → checkpoint",
      text: started.map((s) => s.status), textposition: "inside", insidetextanchor: "start",
      customdata: started.map((s) => `${label(s)}: ${s.status}<br>emitted ${new Date(s.emitted_at).toLocaleTimeString()}` +
        (s.checkpoint_at ? `<br>checkpoint after ${secs(s.latency_s)}, pause ${ms(s.pause_ms)}, ${bytes(s.bytes)}` : "")),
      hovertemplate: "%{customdata}<extra></extra>" };
    const applied = rows.filter((s) => s.applied_at);
    const marks = { type: "scatter", mode: "markers", name: "applied (epoch)", y: applied.map(label), x: applied.map((s) => loc(s.applied_at)),
      text: applied.map((s) => `applied in epoch ${s.applied_epoch}`), hovertemplate: "%{text}<extra></extra>",
      marker: { symbol: "diamond", size: 8, color: "#111827" } };
    // every step keeps its row (pending ones empty) and the axis runs to now while the plan is open
    const t0 = started.length ? new Date(started[0].emitted_at) : new Date(p.created_at);
    const ends = rows.filter((s) => s.checkpoint_at).map((s) => new Date(s.checkpoint_at));
    const t1 = p.open ? new Date() : new Date(Math.max(t0.getTime() + 1000, ...ends));
    const edge = Math.max(500, (t1 - t0) * 0.04);
    const nowLine = p.open ? [{ type: "line", xref: "x", yref: "paper", x0: loc(t1.toISOString()), x1: loc(t1.toISOString()),
      y0: 0, y1: 1, line: { color: "#6b7280", width: 1, dash: "dot" } }] : [];
    draw("plan-timeline", [bars, marks], { title: { text: `Step timeline${p.open ? " · dotted: now" : ""}`, font: { size: 13 }, x: 0 },
      hovermode: "closest", shapes: nowLine,
      xaxis: { type: "date", range: [loc(new Date(t0 - edge).toISOString()), loc(new Date(t1.getTime() + edge).toISOString())] },
      yaxis: { type: "category", categoryorder: "array", categoryarray: rows.map(label), range: [rows.length - 0.5, -0.5] },
      margin: { l: 60, r: 20, t: 30, b: 36 }, showlegend: false, bargap: 0.35 });
    draw("plan-pause", [
      { type: "bar", name: "predicted pause", x: rows.map(label), y: rows.map((s) => s.predicted_ms), marker: { color: "#cbd5e1" } },
      { type: "bar", name: "measured pause", x: rows.map(label), y: rows.map((s) => s.pause_ms), marker: { color: C.accent } },
    ], { title: { text: "Pause per step: predicted vs measured", font: { size: 13 }, x: 0 }, barmode: "group",
      yaxis: { title: "ms", rangemode: "tozero" }, hovermode: "x unified" });
    $("plan-steps").innerHTML = `<tr><th>step</th><th>moves</th><th>status</th><th>emitted</th><th>applied (epoch)</th><th>checkpoint</th>
      <th class="num">latency</th><th class="num">pause pred. / meas.</th><th class="num">bytes</th><th class="num">keys</th><th>map after</th></tr>` +
      rows.map((s) => `<tr data-step="${s.step}" data-status="${esc(s.status)}"><td>${s.step}</td>
        <td>${s.handover ? `<span class="badge info" title="no state moves: the bins change owner at a window boundary">handover</span> ` : ""}${s.code ? stepCode(s.code) : s.moves.slice(0, 6).map((mv) => `<code>${mv.bin}:${mv.from}→${mv.to}</code>`).join(" ")}${s.moves.length > 6 ? ` +${s.moves.length - 6}` : ""}</td>
        <td>${badge(s.status)}${s.reason && (s.status !== "applied" || s.code || s.handover) ? `<div class="sub" data-field="step-reason">${esc(s.reason)}</div>` : ""}</td>
        <td>${hms(s.emitted_at)}${s.offset !== null ? `<div class="sub">offset ${s.offset}</div>` : ""}</td>
        <td>${hms(s.applied_at)}${s.applied_epoch !== null ? ` <span class="sub">(${s.applied_epoch})</span>` : ""}</td>
        <td>${hms(s.checkpoint_at)}</td><td class="num">${secs(s.latency_s)}</td>
        <td class="num">${ms(s.predicted_ms)} / ${ms(s.pause_ms)}</td><td class="num">${bytes(s.bytes)}</td><td class="num">${num(s.keys)}</td>
        <td>${s.map_version_after !== null ? "v" + s.map_version_after : "–"}</td></tr>`).join("");
  }

  // an upgrade step: the version it deploys and, for a shadow, how long the two run side by side
  function stepCode(c) {
    const how = c.shadow ? ` · shadow ${c.shadow.epochs} epochs${c.shadow.fields ? " on " + c.shadow.fields.join(", ") : ""}` : "";
    return `<code>upgrade → v${esc(c.version)}</code><div class="sub">${esc(c.ref)}${esc(how)}</div>`;
  }

  // -------------------------------------------------------------------- handover
  // the job's newest handover (docs/handover.md), from its decision log: both owners of each bin, the
  // event-time timestamps in UTC, the watermark per epoch against the old owner's boundary; once
  // applied, the 0 bytes its checkpoint moved
  const utc = (iso) => (iso ? `<span title="${esc(iso)}">${esc(iso.slice(11, 23))}</span>` : "–");
  const utcAxis = (iso) => (iso ? iso.slice(0, 23).replace("T", " ") : null);  // Plotly shows it as written: UTC
  function renderHandover(h) {
    let box = $("handover");
    if (!box) {
      box = document.createElement("div");
      box.id = "handover"; box.className = "handover";
      $("plan-section").insertBefore(box, $("plan-detail"));
    }
    const sig = JSON.stringify(h || null);
    if (box.dataset.sig === sig) return;
    box.dataset.sig = sig;
    box.hidden = !h;
    if (!h) { box.innerHTML = ""; return; }
    box.dataset.status = h.status;
    const cp = h.checkpoint;
    const row = (label, value, title) => `<tr title="${esc(title)}"><th>${label}</th><td class="num">${value}</td></tr>`;
    const pairs = [];  // one row per (old owner, new owner): the bins it hands over
    for (const mv of h.moves) {
      const p = pairs.find(([a, z]) => a === mv.from && z === mv.to);
      if (p) p[2].push(mv.bin); else pairs.push([mv.from, mv.to, [mv.bin]]);
    }
    const moved = cp ? `${bytes(cp.bytes_moved)}${cp.status === "applied" ? " (by handover)" : ""}` : "none: nothing is copied";
    box.innerHTML = `<h3>Handover ${badge(h.status)} <span class="sub">plan <code>${esc(h.plan_id)}</code> step ${h.step} · ${cp ? `both owners got the bins' rows from epoch ${num(h.since_epoch)} to ${num(cp.applied_epoch ?? h.epoch)}`
      : `both owners get the bins' rows since epoch ${num(h.since_epoch)}`}</span></h3>
      <p class="sentence" data-field="handover">${esc(h.sentence)}</p>
      <div class="two"><div class="handover-tables">
        <table class="grid" id="handover-times"><tr><th>event time (UTC)</th><th class="num"></th></tr>
          ${h.sessions ? row("first event", utc(h.migration_at), "the new owner sees every row of the bins from this event time on")
            : row("migration", utc(h.migration_at), "the start of the last window the old owner finishes")}
          ${h.sessions ? row("activation", utc(h.activation_at), `the new owner's sessions start here or later (first event + the ${num(h.gap_ms)} ms gap); earlier ones are the old owner's`)
            : row("activation", utc(h.activation_at), "the new owner's first window starts here")}
          ${h.sessions ? row("boundary", utc(h.boundary_at), "the watermark must pass it, and every key must start a session the new owner owns or go quiet for a gap")
            : row("boundary", utc(h.boundary_at), "the end of the old owner's last window: the handover completes when the watermark reaches it")}
          ${row(`watermark <span class="sub">(epoch ${num(h.epoch)}${cp ? ", the last it waited" : ""})</span>`, h.watermark_at ? utc(h.watermark_at) : "not known yet", "the watermark the job's last waiting epoch ran its timers at")}
          ${h.sessions ? row("keys still holding it open", h.keys_open === null ? "not known yet" : num(h.keys_open), "keys whose session on the old owner may still be open: each until it starts a session the new owner owns or goes quiet for a gap; a key that never goes quiet keeps the handover open")
            : row("windows left on the old owner", num(h.windows_left), "the old owner's windows still open: their ends lie between the watermark and the boundary")}
          ${row("state moved", moved, "a handover moves no state: the new owner builds its windows from the input")}</table>
        <table class="grid" id="handover-bins"><tr><th>bins</th><th>old owner</th><th>new owner</th></tr>${pairs.map(([a, z, bins]) =>
          `<tr data-from="${a}" data-to="${z}"><td>${bins.join(", ")}</td><td>${wLabel(a)}</td><td>${wLabel(z)}</td></tr>`).join("")}</table>
      </div><div id="handover-chart" class="chart short"></div></div>`;
    const ep = h.history.epoch, x0 = ep[0] - 0.5, x1 = (cp && cp.applied_epoch !== null ? cp.applied_epoch : ep[ep.length - 1]) + 0.5;
    const level = (at, name, color, dash) => ({ x: [x0, x1], y: [utcAxis(at), utcAxis(at)], name, type: "scatter", mode: "lines",
      line: { color, dash, width: 1.5 }, hovertemplate: `${name} %{y|%H:%M:%S.%L}<extra></extra>` });
    const traces = [
      level(h.boundary_at, "boundary (old owner's last window ends)", C.bad, "solid"),
      level(h.activation_at, "activation (new owner's first window)", C.info, "dash"),
      level(h.migration_at, "migration", C.muted, "dot"),
      { x: ep, y: h.history.watermark_at.map(utcAxis), name: "watermark", type: "scatter", mode: "lines+markers",
        line: { color: C.accent, width: 2, shape: "hv" }, marker: { size: 5 }, hovertemplate: "epoch %{x}: watermark %{y|%H:%M:%S.%L}<extra></extra>" },
    ];
    const all = [h.migration_at, h.boundary_at, ...h.history.watermark_at].filter((v) => v).map((v) => Date.parse(v));
    const lo = Math.min(...all), hi = Math.max(...all), pad = Math.max(200, 0.1 * (hi - lo));
    if (cp && cp.status === "applied") traces.push({ x: [cp.applied_epoch], y: [utcAxis(h.boundary_at)], name: `applied (epoch ${cp.applied_epoch})`,
      type: "scatter", mode: "markers", marker: { symbol: "diamond", size: 10, color: "#111827" }, hovertemplate: "applied in epoch %{x}<extra></extra>" });
    draw("handover-chart", traces, { title: { text: "Watermark against the boundary (event time, UTC)", font: { size: 13 }, x: 0 },
      hovermode: "closest", xaxis: { title: "epoch", range: [x0, x1], ...(x1 - x0 > 20 ? {} : { dtick: 1 }) },
      yaxis: { type: "date", tickformat: "%H:%M:%S.%L", range: [utcAxis(new Date(lo - pad).toISOString()), utcAxis(new Date(hi + pad).toISOString())] }, margin: { l: 90, r: 20, t: 30, b: 40 },
      legend: { orientation: "h", x: 0, y: -0.3 } });
  }

  // ------------------------------------------------------------------- decisions
  function renderDecisions(list) {
    $("chart-decisions").hidden = !list.length;
    const t = list.map((d) => loc(d.at));
    const shapes = [];
    const last = list[list.length - 1];
    if (last && last.target_utilization !== null && last.target_utilization !== undefined) {
      const band = last.utilization_band || 0;
      shapes.push({ type: "rect", xref: "paper", yref: "y2", x0: 0, x1: 1, y0: last.target_utilization - band,
        y1: last.target_utilization + band, fillcolor: "rgba(21,128,61,.08)", line: { width: 0 }, layer: "below" });
    }
    const changed = list.filter((d) => d.action !== "no_change");
    if (list.length) draw("chart-decisions", [
      { x: t, y: list.map((d) => d.current_workers), name: "current W", type: "scatter", mode: "lines", line: { shape: "hv", color: "#6b7280" } },
      { x: t, y: list.map((d) => d.proposed_workers), name: "DS2 proposed W", type: "scatter", mode: "markers", marker: { symbol: "circle-open", color: C.info, size: 8 } },
      { x: changed.map((d) => loc(d.at)), y: changed.map((d) => d.target_workers), name: "applied W (after guards)", type: "scatter", mode: "markers",
        marker: { symbol: "diamond", color: C.accent, size: 11 }, text: changed.map((d) => d.action), hovertemplate: "%{text} → %{y}<extra></extra>" },
      { x: t, y: list.map((d) => d.utilization), name: "utilization", yaxis: "y2", type: "scatter", mode: "lines+markers",
        line: { color: C.warn, width: 1.5 }, marker: { size: 4 } },
    ], { title: { text: "Workers proposed and applied, utilization (band: target ± tolerance)", font: { size: 13 }, x: 0 },
      xaxis: { type: "date", range: [loc(new Date(Date.now() - windowMs()).toISOString()), loc(new Date().toISOString())] },
      yaxis: { title: "workers", dtick: 1, range: [0, 1 + Math.max(1, ...list.map((d) => Math.max(d.current_workers, d.proposed_workers, d.target_workers)))] }, shapes,
      yaxis2: { title: "utilization", overlaying: "y", side: "right", showgrid: false, tickformat: ".0%",
        range: [0, Math.max(1, ...list.map((d) => (d.utilization || 0) * 1.1))] } });
    const rows = list.slice().reverse().slice(0, 40);
    $("decisions").innerHTML = `<tr><th>time</th><th>action</th><th class="num">W now → DS2 → applied</th><th class="num">utilization</th>
      <th>guard</th><th>reason</th><th>plan</th><th></th></tr>` + (rows.map((d) => `<tr><td>${when(d.at)}</td><td>${badge(d.action)}</td>
      <td class="num">${d.current_workers} → ${d.proposed_workers} → <b>${d.target_workers}</b></td>
      <td class="num">${d.utilization === null || d.utilization === undefined ? "–" : (100 * d.utilization).toFixed(0) + "%"}</td>
      <td><span class="badge muted">${esc(d.guard)}</span></td><td class="reason">${esc(d.reason)}</td>
      <td>${d.plan_id ? `<a href="#" data-plan="${esc(d.plan_id)}"><code>${esc(d.plan_id)}</code></a>` : ""}</td><td>${runLink(d.run)}</td></tr>`).join("")
      || `<tr><td colspan="8" class="muted">No DS2 decision in this window (ballast_rebalance decides on its schedule).</td></tr>`);
  }
  const windowMs = () => ({ "15m": 900e3, "1h": 3600e3, "24h": 86400e3 }[S.window]);

  // ---------------------------------------------------------------------- events
  function renderEvents(d) {
    const kinds = [`<option value="">all</option>`, ...d.kinds.map((k) => `<option${k === S.ev.kind ? " selected" : ""}>${esc(k)}</option>`)].join("");
    const sel = $("ev-kind");
    if (sel.dataset.sig !== kinds) { sel.innerHTML = kinds; sel.dataset.sig = kinds; }
    $("events").innerHTML = `<tr><th>time</th><th>level</th><th>kind</th><th class="num">epoch</th><th>message</th><th>plan / step</th></tr>` +
      (d.events.map((e) => `<tr data-kind="${esc(e.kind)}"><td>${when(e.at)}</td><td>${badge(e.level)}</td><td><code>${esc(e.kind)}</code></td>
        <td class="num">${e.epoch ?? "–"}</td><td class="reason">${esc(e.message)}</td>
        <td>${e.plan_id ? `<a href="#" data-plan="${esc(e.plan_id)}"><code>${esc(e.plan_id)}</code></a>${e.step ? " / " + e.step : ""}` : ""}</td></tr>`).join("")
        || `<tr><td colspan="6" class="muted">No event matches in this window.</td></tr>`);
  }

  // ------------------------------------------------------------ trigger form
  // the trigger form of a manual DAG: ballast_migrate ("Plan a migration…") or ballast_upgrade ("Upgrade the processor…")
  async function openTrigger(dagId, what) {
    const dlg = $("trigger"), form = $("trigger-form");
    form.innerHTML = `<h2>${esc(what)} of ${esc(S.job)}</h2><p class="muted">loading the form of ${esc(dagId)}…</p>`;
    dlg.showModal();
    let dag;
    try {
      const r = await fetch(`${AF}/api/v2/dags/${encodeURIComponent(dagId)}/details`, { credentials: "same-origin" });
      if (!r.ok) throw new Error(`Airflow answered HTTP ${r.status}`);
      dag = await r.json();
    } catch (err) {
      form.innerHTML = `<h2>${esc(what)}</h2><p class="warn-box">${esc(err.message)}</p><div class="buttons"><button class="secondary" value="cancel">Close</button></div>`;
      return;
    }
    const params = dag.params || {};
    // the job, a dry run, and for a migration one worker more (or fewer at the upper bound) as a starting point
    const j = S.jobs.find((x) => x.job === S.job && x.operator === S.operator) || {};
    const prefill = { job: S.job, dry_run: true };
    if (j.workers && dagId === BOOT.migrate_dag) prefill.target_workers = j.max_workers && j.workers >= j.max_workers ? Math.max(j.min_workers || 1, j.workers - 1) : j.workers + 1;
    const fields = Object.entries(params).map(([name, p]) => {
      const schema = p.schema || {}, value = name in prefill ? prefill[name] : p.value;
      const types = [].concat(schema.type || []);
      const title = schema.title || name, desc = p.description || schema.description || "";
      let input;
      if (schema.enum) input = `<select name="${esc(name)}">${schema.enum.map((o) => `<option${o === value ? " selected" : ""}>${esc(o)}</option>`).join("")}</select>`;
      else if (types.includes("boolean")) input = `<input type="checkbox" name="${esc(name)}"${value ? " checked" : ""}>`;
      else if (types.includes("integer") || types.includes("number")) input = `<input type="number" name="${esc(name)}" step="${types.includes("integer") ? 1 : "any"}" value="${value ?? ""}">`;
      else if (types.includes("array") || types.includes("object")) input = `<textarea name="${esc(name)}" rows="2">${esc(JSON.stringify(value ?? (types.includes("array") ? [] : {})))}</textarea>`;
      else input = `<input type="text" name="${esc(name)}" value="${esc(value ?? "")}">`;
      return `<div class="field" data-param="${esc(name)}" data-types="${esc(types.join(","))}"><label>${esc(title)}</label>${input}<div class="desc">${esc(desc)}</div></div>`;
    });
    form.innerHTML = `<h2>${esc(what)} of ${esc(S.job)}</h2>
      <p class="sub">Triggers <b>${esc(dagId)}</b> through Airflow's API as you, with the DAG's own parameters${dag.is_paused ? " — <b>the DAG is paused: the run will wait</b>" : ""}. A dry run only prints what would be sent in the task log.</p>
      ${fields.join("")}<div class="buttons"><button class="secondary" value="cancel">Close</button><button class="primary" id="trigger-go" value="">Trigger</button></div><div class="result" id="trigger-result"></div>`;
    $("trigger-go").addEventListener("click", (ev) => { ev.preventDefault(); submitTrigger(form, dagId); });
  }
  async function submitTrigger(form, dagId) {
    const conf = {}, out = $("trigger-result");
    try {
      for (const f of form.querySelectorAll(".field")) {
        const name = f.dataset.param, types = f.dataset.types.split(","), el = f.querySelector("input,select,textarea");
        if (el.type === "checkbox") conf[name] = el.checked;
        else if (el.tagName === "TEXTAREA") conf[name] = JSON.parse(el.value || "null");
        else if (el.type === "number") conf[name] = el.value === "" ? null : Number(el.value);
        else conf[name] = el.value === "" && types.includes("null") ? null : el.value;
      }
    } catch (err) { out.innerHTML = `<p class="warn-box">${esc(err.message)}</p>`; return; }
    const r = await fetch(`${AF}/api/v2/dags/${encodeURIComponent(dagId)}/dagRuns`, { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" }, body: JSON.stringify({ logical_date: null, conf }) });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) { out.innerHTML = `<p class="warn-box">Airflow refused the run (HTTP ${r.status}): ${esc(JSON.stringify(body.detail ?? body))}</p>`; return; }
    const url = `${AF}/dags/${encodeURIComponent(dagId)}/runs/${encodeURIComponent(body.dag_run_id)}`;
    out.innerHTML = `<p>Run <a target="_top" href="${esc(url)}"><code>${esc(body.dag_run_id)}</code> ↗</a> created (${conf.dry_run ? "dry run" : dagId === BOOT.upgrade_dag ? "upgrade" : "migration"}).</p>`;
  }

  // ------------------------------------------------------------------- schedule
  const seriesEvery = () => ({ "15m": 10e3, "1h": 30e3, "24h": 60e3 }[S.window]);
  const planOpen = () => !!(S.plan && S.plan.open) || !!S.jobs.find((j) => j.job === S.job && j.open_plan);
  const tasks = {
    jobs: { every: () => 3e3, run: async () => {
      renderJobs(await api("/api/jobs"));
      // a plan that just opened: show it now, not at the plans' next slow refresh
      const j = S.jobs.find((x) => x.job === S.job && x.operator === S.operator);
      if (j && j.open_plan && !S.pinnedPlan && (!S.plan || S.plan.plan_id !== j.open_plan.plan_id)) now("plans", "binmap");
    } },
    plans: { every: () => (planOpen() ? 4e3 : 15e3), job: true, run: async () => {
      const [list, accuracy] = await Promise.all([api(jobPath("plans"), { operator: S.operator }),
        api(jobPath("plan-accuracy"), { operator: S.operator })]);
      renderPlans(list);
      renderAccuracy(accuracy);
      const id = currentPlanId();
      renderPlan(id ? await api(`/api/plans/${encodeURIComponent(id)}`) : null);
      renderPlans(S.plans);
    } },
    plan: { every: () => (planOpen() ? 2e3 : 30e3), job: true, run: async () => {
      const id = currentPlanId();
      if (id) renderPlan(await api(`/api/plans/${encodeURIComponent(id)}`));
    } },
    binmap: { every: () => (planOpen() ? 3e3 : 15e3), job: true, run: async () =>
      renderBinmap(await api(jobPath("binmap"), { operator: S.operator, version: S.mapVersion })) },
    series: { every: seriesEvery, job: true, run: async () => renderSeries(await api(jobPath("series"), { operator: S.operator, window: S.window })) },
    critical: { every: () => 15e3, job: true, run: async () => renderCritical(await api(jobPath("critical"), { operator: S.operator })) },
    decisions: { every: () => 15e3, job: true, run: async () => renderDecisions(await api(jobPath("decisions"), { operator: S.operator, window: S.window })) },
    events: { every: () => 15e3, job: true, run: async () => renderEvents(await api(jobPath("events"), { window: S.window, level: S.ev.level, kind: S.ev.kind, q: S.ev.q })) },
  };
  for (const t of Object.values(tasks)) { t.next = 0; t.busy = false; }
  async function runTask(name) {
    const t = tasks[name];
    if (t.busy || (t.job && !S.job)) return;
    t.busy = true;
    try {
      await t.run();
      live("ok");
      $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      console.error(name, err);
      if (!/HTTP 40[13]/.test(String(err))) live("err", `${name}: ${err.message}`);
    } finally {
      t.busy = false;
      t.next = Date.now() + t.every();
    }
  }
  const now = (...names) => names.forEach((n) => { tasks[n].next = 0; runTask(n); });
  setInterval(() => {
    if (document.hidden) return;
    for (const [name, t] of Object.entries(tasks)) if (Date.now() >= t.next) runTask(name);
  }, 500);
  document.addEventListener("visibilitychange", () => live(document.hidden ? "off" : "ok", document.hidden ? "paused" : "live"));

  // ----------------------------------------------------------------- interaction
  $("window").addEventListener("click", (ev) => {
    const w = ev.target.dataset.window;
    if (!w) return;
    S.window = w;
    for (const b of $("window").querySelectorAll("button")) b.classList.toggle("on", b.dataset.window === w);
    const u = new URL(location.href); u.searchParams.set("window", w); history.replaceState(null, "", u);
    now("series", "decisions", "events");
  });
  $("map-metric").addEventListener("click", (ev) => {
    const m = ev.target.dataset.metric;
    if (!m) return;
    S.metric = m;
    for (const b of $("map-metric").querySelectorAll("button")) b.classList.toggle("on", b.dataset.metric === m);
    if (S.binmap) renderBinmap(S.binmap);
  });
  $("map-version").addEventListener("change", (ev) => { S.mapVersion = ev.target.value === "" ? null : Number(ev.target.value); now("binmap"); });
  const showPlan = (id) => { S.pinnedPlan = id; now("plan"); $("plan-section").scrollIntoView({ behavior: "smooth" }); };
  document.addEventListener("click", (ev) => {
    const a = ev.target.closest("[data-plan]");
    if (a && (a.tagName === "A" || a.closest("#recent-plans"))) { ev.preventDefault(); showPlan(a.dataset.plan); return; }
    const row = ev.target.closest("#jobs tr[data-job]");
    if (row && ev.target.tagName !== "A") location.href = `${ROOT}/?job=${encodeURIComponent(row.dataset.job)}&operator=${encodeURIComponent(row.dataset.operator)}&window=${S.window}`;
  });
  $("ev-level").addEventListener("change", (ev) => { S.ev.level = ev.target.value; now("events"); });
  $("ev-kind").addEventListener("change", (ev) => { S.ev.kind = ev.target.value; now("events"); });
  let typing;
  $("ev-text").addEventListener("input", (ev) => { clearTimeout(typing); typing = setTimeout(() => { S.ev.q = ev.target.value; now("events"); }, 300); });
  $("plan-btn").addEventListener("click", () => openTrigger(BOOT.migrate_dag, "Plan a migration"));
  $("upgrade-btn").addEventListener("click", () => openTrigger(BOOT.upgrade_dag, "Upgrade the processor"));
  $("trigger").addEventListener("close", () => { $("trigger-form").innerHTML = ""; });

  if (S.job) {
    const j = S.jobs.find((x) => x.job === S.job && x.operator === S.operator);
    if (j) renderFacts(j);
    renderHandover(j ? j.handover : null);
  }
})();
