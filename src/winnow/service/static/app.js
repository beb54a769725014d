// Winnow inspector: ask a question, then see what every stage did to every passage.
// Plain JavaScript, no build step. It reads the same JSON the API returns (`include_trace: true`):
// each stage's input and output lists with per-stage scores and ranks, its details (MAIN-RAG's
// per-document answers, judge scores and τ; RRR's rounds and rewrites; RankGPT's windows) and
// every LLM call.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { key: localStorage.getItem("winnow-key") || "", methods: null, health: null,
                controller: null, timer: null };

// ---- small helpers ----------------------------------------------------------------------------

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value == null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "style") el.style.cssText = value;
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : value);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid == null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

function num(x, digits = 3) {
  if (x == null || Number.isNaN(x)) return "–";
  if (Number.isInteger(x)) return x.toLocaleString();
  return Math.abs(x) >= 100 ? x.toFixed(1) : x.toPrecision(digits).replace(/\.?0+$/, "");
}

const seconds = (s) => (s == null ? "–" : s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(1)} s`);
const ordinal = (n) => { const s = ["th", "st", "nd", "rd"], v = n % 100; return n + (s[(v - 20) % 10] || s[v] || s[0]); };
const clip = (text, n) => (text && text.length > n ? text.slice(0, n - 1) + "…" : text || "");

function headers() {
  const out = { "Content-Type": "application/json" };
  if (state.key) out.Authorization = `Bearer ${state.key}`;
  return out;
}

class ApiError extends Error {
  constructor(status, body) {
    const detail = (body && body.error) || {};
    super(detail.message || `HTTP ${status}`);
    this.status = status;
    this.field = detail.field;
  }
}

async function api(path, body) {
  const init = body ? { method: "POST", headers: headers(), body: JSON.stringify(body) } : { headers: headers() };
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

function showError(message) {
  const box = $("error");
  box.replaceChildren(h("strong", {}, "Error: "), message);
  box.hidden = !message;
}

// ---- start-up: server, key, methods -----------------------------------------------------------

async function init() {
  $("ask-form").addEventListener("submit", onAsk);
  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.key = $("key").value.trim();
    localStorage.setItem("winnow-key", state.key);
    showError("");
    loadMethods();
  });
  $("method").addEventListener("change", () => showMethod($("method").value));
  try {
    state.health = await (await fetch("/healthz")).json();
  } catch (err) {
    $("server").textContent = "server unreachable";
    return;
  }
  const hl = state.health;
  $("server").replaceChildren(
    h("span", { class: "dot ok" }), `${hl.model} · ${hl.index.split("/").filter(Boolean).pop()} · default ${hl.method}`);
  if (hl.auth) {
    $("key-form").hidden = false;
    $("key").value = state.key;
  }
  await loadMethods();
  const match = location.hash.match(/^#trace=([0-9a-f]+)/);
  if (match) showTrace(match[1]);
}

async function loadMethods() {
  try {
    state.methods = await api("/v1/methods");
  } catch (err) {
    showError(err.status === 401 ? "this server needs an API key: enter it at the top right." : err.message);
    return;
  }
  const select = $("method");
  select.replaceChildren(...state.methods.methods.map((m) => h("option", { value: m.name }, m.name)));
  select.value = state.methods.default;
  showMethod(select.value);
}

function methodInfo(name) {
  return state.methods.methods.find((m) => m.name === name);
}

function showMethod(name) {
  const info = methodInfo(name);
  const settings = { ...info.defaults, ...(name === state.methods.default ? state.methods.default_settings : {}) };
  $("n").value = settings.n;
  $("k").value = settings.k;
  $("n").max = state.methods.limits.max_n;
  $("k").max = state.methods.limits.max_k;
  $("method-summary").textContent = info.summary;
  const extra = Object.entries(settings).filter(([key]) => key !== "n" && key !== "k");
  $("settings").replaceChildren(...extra.map(([key, value]) => h("label", {},
    key, h("input", { "data-setting": key, "data-type": typeof value, placeholder: String(value), class: "num wide" }))));
}

// ---- asking, with progress from server-sent events --------------------------------------------

async function onAsk(ev) {
  ev.preventDefault();
  if (state.controller) {  // the button says Cancel while a request runs
    state.controller.abort();
    return;
  }
  const body = { question: $("question").value, method: $("method").value, stream: true, include_trace: true };
  if ($("n").value) body.n = Number($("n").value);
  if ($("k").value) body.k = Number($("k").value);
  const options = {};
  for (const input of $("settings").querySelectorAll("input[data-setting]")) {
    if (input.value.trim() === "") continue;
    options[input.dataset.setting] = input.dataset.type === "number" ? Number(input.value) : input.value;
  }
  if (Object.keys(options).length) body.options = options;
  showError("");
  startProgress();
  state.controller = new AbortController();
  $("ask-button").textContent = "Cancel";
  try {
    const response = await fetch("/v1/ask", { method: "POST", headers: headers(), body: JSON.stringify(body),
                                               signal: state.controller.signal });
    if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => ({})));
    await readEvents(response);
  } catch (err) {
    if (err.name === "AbortError") showError("cancelled; the server freed the request's slot.");
    else showError(err.field ? `${err.message} (field: ${err.field})` : err.message);
    $("progress").hidden = true;
  } finally {
    state.controller = null;
    $("ask-button").textContent = "Ask";
    clearInterval(state.timer);
  }
}

async function readEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const chunk = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message", data = "";
      for (const line of chunk.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trim();
      }
      onEvent(event, data ? JSON.parse(data) : {});
    }
  }
}

function startProgress() {
  $("progress").hidden = false;
  $("result").hidden = true;
  $("status").textContent = "Sending…";
  $("stage-progress").replaceChildren();
  const started = performance.now();
  clearInterval(state.timer);
  state.timer = setInterval(() => { $("elapsed").textContent = seconds((performance.now() - started) / 1000); }, 100);
}

function onEvent(event, data) {
  if (event === "accepted") {
    $("status").textContent = `Accepted (trace ${data.trace_id})`;
  } else if (event === "queued") {
    $("status").textContent = data.position > 1 ? `Queued: ${data.position - 1} request(s) ahead` : "Queued";
  } else if (event === "started") {
    $("status").textContent = "Running on the model";
  } else if (event === "progress") {
    let row = $("stage-progress").querySelector(`[data-stage="${CSS.escape(data.stage)}"]`);
    if (!row) {
      row = h("div", { class: "stage-bar", "data-stage": data.stage },
        h("span", { class: "name" }, data.stage), h("div", { class: "track" }, h("div", { class: "fill" })),
        h("span", { class: "count mono" }));
      $("stage-progress").append(row);
    }
    row.querySelector(".fill").style.width = `${(100 * data.done) / Math.max(1, data.total)}%`;
    row.querySelector(".count").textContent = `${data.done}/${data.total} LLM calls`;
    row.classList.toggle("done", data.done >= data.total);
    $("status").textContent = `Running: ${data.stage}`;
  } else if (event === "result") {
    $("progress").hidden = true;
    render(data);
  } else if (event === "error") {
    throw new ApiError(0, data);
  }
}

async function showTrace(id) {
  try {
    const record = await api(`/v1/traces/${id}`);
    if (record.result && record.kind === "ask") render(record.result, true);
    else showError(`trace ${id} is ${record.status}`);
  } catch (err) {
    showError(err.message);
  }
}

// ---- the result -------------------------------------------------------------------------------

function render(result) {
  $("result").hidden = false;
  history.replaceState(null, "", `#trace=${result.trace_id}`);
  if (!$("question").value) $("question").value = result.question;
  const trace = result.trace || { stages: [], documents: {} };
  $("answer").textContent = result.answer || "(no answer)";
  const served = { "llm": "computed by the model", "call-cache": "every LLM call from the cache",
                   "answer-cache": "answered before: from the answer cache" }[result.served_from] || result.served_from;
  $("answer-meta").replaceChildren(
    h("span", { class: "chip strong" }, result.method),
    h("span", { class: "chip" }, `N=${result.settings.n} · k=${result.settings.k}`),
    h("span", { class: "chip" }, (result.model && result.model.model) || result.settings.model),
    h("span", { class: `chip ${result.served_from === "llm" ? "" : "cached"}` }, served),
    h("span", { class: "chip" }, seconds(result.seconds)),
    h("a", { class: "chip link", href: `/v1/traces/${result.trace_id}`, target: "_blank" }, `trace ${result.trace_id}`));
  renderJourney(result, trace);
  renderCost(result, trace);
  renderStages(trace);
  renderDetails(result, trace);
  renderCalls(trace);
}

// Every passage any stage saw, with the score and rank each stage gave it, and its fate.
function collectRows(result, trace) {
  const rows = new Map();
  const columns = [];
  const docs = trace.documents || {};
  const touch = (item) => {
    let row = rows.get(item.id);
    if (!row) {
      row = { id: item.id, title: item.title || (docs[item.id] || {}).title || item.id, scores: {}, notes: [] };
      rows.set(item.id, row);
    }
    for (const s of item.scores || []) {
      if (s.stage === "input") continue;
      if (!columns.includes(s.stage)) columns.push(s.stage);
      if (s.rank > 0 || !(s.stage in row.scores)) row.scores[s.stage] = s;
    }
    if (item.note && !row.notes.includes(item.note)) row.notes.push(item.note);
    return row;
  };
  for (const stage of trace.stages) {
    stage.input.forEach(touch);
    stage.output.forEach(touch);
    const details = stage.details || {};
    // A reranker that passed on only its top k keeps the whole order in ranked_ids; the scores of
    // the rest are the answers of its LLM calls, one per input passage in input order.
    if (details.ranked_ids && !columns.includes(stage.name)) columns.push(stage.name);
    (details.ranked_ids || []).forEach((id, i) => {
      const row = rows.get(id);
      if (!row || row.scores[stage.name]) return;
      const at = stage.input.findIndex((c) => c.id === id);
      const call = stage.llm_calls.length === stage.input.length ? stage.llm_calls[at] : null;
      const score = call && call.output && typeof call.output === "object" ? call.output.True : null;
      row.scores[stage.name] = { stage: stage.name, score, rank: i + 1 };
      row.cut = `ranked ${ordinal(i + 1)} by ${stage.name}; only the top ${stage.output.length} go on`;
    });
    for (const dropped of details.dropped || []) {
      const row = touch(dropped);
      const note = dropped.note || "";
      row.dropped = note.startsWith("dropped") ? note : `dropped by ${stage.name}${
        stage.settings && stage.settings.round ? ` (round ${stage.settings.round})` : ""}: ${note}`;
    }
  }
  result.passages.forEach((p, i) => { touch(p).final = i + 1; });
  return { rows: [...rows.values()], columns };
}

function scaleFor(values) {
  const finite = values.filter((v) => typeof v === "number" && Number.isFinite(v));
  if (!finite.length) return () => 0;
  const lo = Math.min(...finite), hi = Math.max(...finite);
  if (lo >= 0 && hi <= 1) return (v) => v;  // probabilities: absolute
  if (hi === lo) return () => 1;
  return (v) => 0.08 + (0.92 * (v - lo)) / (hi - lo);  // min-max, the lowest still visible
}

function renderJourney(result, trace) {
  const { rows, columns } = collectRows(result, trace);
  const first = columns[0];
  const scales = Object.fromEntries(columns.map((c) => [c, scaleFor(rows.map((r) => (r.scores[c] || {}).score))]));
  const lastRanker = columns[columns.length - 1];
  const sortKey = (row) => [row.final ? 0 : row.dropped ? 2 : 1, row.final || (row.scores[lastRanker] || {}).rank
                            || (row.scores[first] || {}).rank || 999];
  rows.sort((a, b) => { const x = sortKey(a), y = sortKey(b); return x[0] - y[0] || x[1] - y[1]; });
  const head = h("tr", {}, h("th", {}, "passage"), columns.map((c) => h("th", { class: "stage-col" }, c)),
    h("th", {}, "outcome"));
  const body = rows.map((row) => {
    const start = (row.scores[first] || {}).rank;
    const cells = columns.map((c) => {
      const s = row.scores[c];
      if (!s) return h("td", { class: "empty" }, "·");
      let move = null;
      if (c !== first && start && s.rank > 0) {
        const delta = start - s.rank;
        move = delta ? h("span", { class: `move ${delta > 0 ? "up" : "down"}` }, `${delta > 0 ? "▲" : "▼"}${Math.abs(delta)}`)
          : h("span", { class: "move same" }, "=");
      }
      const width = s.score == null ? 0 : Math.max(0, Math.min(1, scales[c](s.score))) * 100;
      return h("td", { class: "stage-col", title: `${c}: score ${num(s.score, 4)}${s.rank ? `, rank ${s.rank}` : ""}` },
        h("div", { class: "cell" }, h("span", { class: "rank mono" }, s.rank ? `#${s.rank}` : "–"), move,
          h("span", { class: "score mono" }, num(s.score))),
        h("div", { class: "bar" }, h("div", { style: `width:${width.toFixed(1)}%` })));
    });
    const found = row.notes.find((n) => n.startsWith("found in round"));
    const outcome = row.final ? h("span", { class: "kept" }, `read as #${row.final}`)
      : h("span", { class: "reason" }, row.dropped || row.cut || row.notes.find((n) => !n.startsWith("found")) ||
        "not passed on");
    const doc = (trace.documents || {})[row.id];
    return h("tr", { class: row.final ? "in" : "out", "data-id": row.id },
      h("td", { class: "title", title: doc ? clip(doc.text, 600) : row.id }, h("div", {}, row.title),
        found ? h("div", { class: "muted small" }, found) : null),
      cells, h("td", { class: "outcome" }, outcome));
  });
  $("journey").replaceChildren(h("table", { class: "journey" }, h("thead", {}, head), h("tbody", {}, body)));
  const dropped = rows.filter((r) => !r.final).length;
  $("journey-note").textContent = `${rows.length} seen · ${result.passages.length} read · ${dropped} left out (greyed)`;
}

function renderCost(result, trace) {
  const u = result.usage;
  const stat = (label, value) => h("div", { class: "stat" }, h("div", { class: "value mono" }, value),
    h("div", { class: "label muted small" }, label));
  const slowest = Math.max(0.001, ...trace.stages.map((s) => s.seconds));
  $("cost").replaceChildren(
    h("div", { class: "stats" }, stat("LLM calls", num(u.calls)), stat("cache hits", num(u.cache_hits)),
      stat("prompt tokens", num(u.prompt_tokens)), stat("completion tokens", num(u.completion_tokens)),
      stat("model time", seconds(u.seconds)), stat("wall time", seconds(result.seconds))),
    h("div", { class: "time-bars" }, trace.stages.map((s) => h("div", { class: "time-row" },
      h("span", { class: "name" }, s.name), h("div", { class: "track" },
        h("div", { class: "fill", style: `width:${((100 * s.seconds) / slowest).toFixed(1)}%` })),
      h("span", { class: "mono small" }, seconds(s.seconds))))));
}

function renderStages(trace) {
  $("stages").replaceChildren(...trace.stages.map((s, i) => h("li", {},
    h("a", { href: `#stage-${i}`, onclick: (ev) => { ev.preventDefault(); $(`stage-${i}`).scrollIntoView({ behavior: "smooth" }); } },
      h("span", { class: "stage-name" }, s.name), h("span", { class: "muted small" }, ` ${s.kind}`)),
    h("span", { class: "muted small mono" },
      `${s.input.length}→${s.output.length} · ${s.llm_calls.length} call${s.llm_calls.length === 1 ? "" : "s"}`))));
}

// ---- stage details: one renderer per kind of detail -------------------------------------------

function renderDetails(result, trace) {
  const docs = trace.documents || {};
  const titleOf = (id) => (docs[id] || {}).title || id;
  const judge = trace.stages.find((s) => s.details && s.details.scores);
  const bar = trace.stages.find((s) => s.details && s.details.tau != null);
  const sections = trace.stages.map((stage, i) => {
    const d = stage.details || {};
    const parts = [];
    const settings = Object.entries(stage.settings || {}).filter(([, v]) => v != null && v !== "");
    if (settings.length) parts.push(h("div", { class: "kv small" }, settings.map(([k, v]) =>
      h("span", {}, h("span", { class: "muted" }, `${k} `), typeof v === "object" ? JSON.stringify(v) : String(v)))));
    if (stage.name === "retrieve" || stage.kind === "bm25" || stage.kind === "dense" || stage.kind === "hybrid") {
      parts.push(rankedList(stage.output, titleOf));
    }
    if (d.answers) parts.push(perDocumentAnswers(d.answers, titleOf, judge, bar));
    if (d.scores && !d.answers && !bar) parts.push(rankedList(stage.output, titleOf));
    if (d.tau != null) parts.push(histogram(judge ? judge.details.scores : {}, d, titleOf));
    if (d.grades) parts.push(gradeTable(d.grades, titleOf));
    if (d.rounds) parts.push(roundsTable(d.rounds, trace, titleOf));
    if (d.windows) parts.push(windowsList(d.windows, titleOf));
    if (d.dropped && d.dropped.length && d.tau == null) parts.push(h("div", { class: "dropped small" },
      d.dropped.map((x) => h("div", {}, h("strong", {}, titleOf(x.id)), ` ${x.note || ""}`))));
    if (d.fallback) parts.push(h("div", { class: "warn small" }, d.fallback));
    if (d.answer != null) parts.push(h("div", { class: "quote" }, d.answer));
    if (stage.kind === "pointwise-true" || stage.kind === "graded" || stage.kind === "embedding-cosine") {
      if (!d.grades) parts.push(rankedList(stage.output, titleOf));
    }
    if (stage.kind === "rewriter") parts.push(h("div", { class: "quote" },
      stage.llm_calls.map((c) => c.output).join(" ") || "(no rewrite)"));
    return h("section", { class: "detail", id: `stage-${i}` },
      h("h3", {}, h("span", { class: "step" }, String(i + 1)), stage.name, h("span", { class: "muted small" },
        ` ${stage.kind} · ${stage.input.length} in → ${stage.output.length} out · ${seconds(stage.seconds)}`)),
      parts);
  });
  $("details").replaceChildren(...sections);
}

function rankedList(items, titleOf) {
  const scale = scaleFor(items.map((c) => c.score));
  return h("ol", { class: "ranked" }, items.slice(0, 20).map((c) => h("li", {},
    h("span", { class: "t" }, titleOf(c.id)),
    h("div", { class: "bar" }, h("div", { style: `width:${(100 * Math.max(0, Math.min(1, scale(c.score)))).toFixed(1)}%` })),
    h("span", { class: "mono small" }, num(c.score)))));
}

function perDocumentAnswers(answers, titleOf, judge, bar) {
  const scores = judge ? judge.details.scores : {};
  const tau = bar ? bar.details.tau : null;
  const rows = Object.entries(answers).map(([id, text]) => {
    const s = scores[id];
    const kept = tau == null || s == null ? null : s >= tau;
    return h("tr", { class: kept === false ? "out" : "" }, h("td", { class: "title" }, titleOf(id)),
      h("td", {}, text), h("td", { class: "mono" }, num(s)),
      h("td", {}, kept == null ? "" : kept ? h("span", { class: "kept" }, "kept") : h("span", { class: "reason" }, "below τ")));
  });
  return h("table", { class: "plain answers" }, h("thead", {}, h("tr", {}, h("th", {}, "document"),
    h("th", {}, "Agent-1's answer from it alone"), h("th", {}, "judge s"), h("th", {}, ""))), h("tbody", {}, rows));
}

// MAIN-RAG's adaptive bar: the judge scores' histogram, each document as a dot, τ and the mean.
function histogram(scores, d, titleOf) {
  const entries = Object.entries(scores);
  const values = entries.map(([, s]) => s);
  const W = 560, H = 170, left = 36, right = 12, top = 16, plotH = 92, dotsY = 138;
  const lo = Math.min(d.tau, ...values), hi = Math.max(d.tau, ...values);
  const pad = (hi - lo) * 0.08 || 0.5;
  const x0 = lo - pad, x1 = hi + pad;
  const x = (v) => left + ((v - x0) / (x1 - x0)) * (W - left - right);
  const bins = Math.max(4, Math.min(12, Math.ceil(Math.sqrt(values.length) * 2)));
  const width = (x1 - x0) / bins;
  const counts = new Array(bins).fill(0);
  values.forEach((v) => { counts[Math.min(bins - 1, Math.floor((v - x0) / width))] += 1; });
  const peak = Math.max(1, ...counts);
  const svg = (tag, attrs, ...kids) => {
    const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    kids.forEach((kid) => el.append(kid));
    return el;
  };
  const text = (x_, y, s, cls) => svg("text", { x: x_, y, class: cls || "" }, document.createTextNode(s));
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "histogram", role: "img",
                             "aria-label": `judge score histogram with adaptive bar tau = ${num(d.tau)}` });
  counts.forEach((c, i) => {
    if (!c) return;
    const from = x0 + i * width, barH = (plotH * c) / peak;
    chart.append(svg("rect", { x: x(from) + 1, y: top + plotH - barH, width: Math.max(1, x(from + width) - x(from) - 2),
                               height: barH, class: from + width / 2 >= d.tau ? "bin kept" : "bin dropped" }));
  });
  chart.append(svg("line", { x1: left, x2: W - right, y1: top + plotH, y2: top + plotH, class: "axis" }));
  for (const v of [x0 + pad, (x0 + x1) / 2, x1 - pad]) chart.append(text(x(v), top + plotH + 14, num(v, 2), "tick"));
  chart.append(text(left - 6, top + 8, String(peak), "tick end"));
  entries.forEach(([id, s]) => {
    const dot = svg("circle", { cx: x(s), cy: dotsY, r: 5, class: s >= d.tau ? "dot kept" : "dot dropped" });
    dot.append(svg("title", {}, document.createTextNode(`${titleOf(id)}: s = ${num(s, 4)}`)));
    chart.append(dot);
  });
  chart.append(svg("line", { x1: x(d.mean), x2: x(d.mean), y1: top - 4, y2: dotsY + 8, class: "mean" }));
  chart.append(svg("line", { x1: x(d.tau), x2: x(d.tau), y1: top - 6, y2: dotsY + 10, class: "tau" }));
  chart.append(text(x(d.tau) + 4, top + 2, `τ = ${num(d.tau)}`, "tau-label"));
  if (Math.abs(x(d.mean) - x(d.tau)) > 40) chart.append(text(x(d.mean) + 4, top + 16, `mean ${num(d.mean)}`, "tick start"));
  const dropped = entries.filter(([, s]) => s < d.tau).length;
  return h("div", { class: "histogram-wrap" }, chart, h("div", { class: "muted small" },
    `τ = mean − n·std = ${num(d.mean)} − n × ${num(d.std)}; ${entries.length - dropped} kept (green), ${dropped} ` +
    `dropped (grey). Dots are documents; hover for titles.`));
}

function gradeTable(grades, titleOf) {
  const colours = ["#e5e7eb", "#c7d2fe", "#a5b4fc", "#818cf8", "#4f46e5"];
  return h("table", { class: "plain grades" }, h("thead", {}, h("tr", {}, h("th", {}, "document"),
    h("th", {}, "σ"), h("th", {}, "E[σ]"), h("th", {}, "P(1…5)"))), h("tbody", {}, grades.map((g) =>
    h("tr", {}, h("td", { class: "title" }, titleOf(g.id)), h("td", { class: "mono" }, g.argmax ?? "–"),
      h("td", { class: "mono" }, num(g.expected)),
      h("td", {}, h("div", { class: "stack", title: JSON.stringify(g.distribution || {}) },
        Object.values(g.distribution || {}).map((p, i) => h("div", { style: `width:${(100 * p).toFixed(1)}%;background:${colours[i]}` }))))))));
}

function roundsTable(rounds, trace, titleOf) {
  return h("table", { class: "plain rounds" }, h("thead", {}, h("tr", {}, h("th", {}, "round"), h("th", {}, "query"),
    h("th", {}, "retrieved"), h("th", {}, "kept (σ > τ)"), h("th", {}, "new"), h("th", {}, "found so far"))),
  h("tbody", {}, rounds.map((r) => h("tr", {}, h("td", { class: "mono" }, r.round),
    h("td", {}, r.round === 1 ? h("span", {}, r.query, h("span", { class: "muted small" }, " (original)")) : h("em", {}, r.query)),
    h("td", { class: "mono" }, r.retrieved), h("td", { class: "mono" }, r.kept.length),
    h("td", { title: r.new.map(titleOf).join(", ") }, clip(r.new.map(titleOf).join(", "), 80) || "–"),
    h("td", { class: "mono" }, r.total)))));
}

function windowsList(windows, titleOf) {
  return h("div", { class: "windows" }, windows.map((w) => h("div", { class: "window" },
    h("div", { class: "small muted" }, `positions ${w.start + 1}–${w.end}`, w.repaired ? " · answer repaired (ids missing)" : "",
      w.skipped ? ` · ${w.skipped}` : ""),
    h("div", { class: "small" }, (w.ranked_ids || w.ids).map((id, i) => h("span", { class: "pill" }, `${i + 1}. ${titleOf(id)}`))),
    w.response ? h("div", { class: "mono small muted" }, `model: ${clip(w.response, 160)}`) : null)));
}

function renderCalls(trace) {
  const calls = trace.stages.flatMap((s) => s.llm_calls);
  $("calls-note").textContent = `${calls.length} call(s), ${calls.filter((c) => c.cached).length} from the cache`;
  if (!calls.length) { $("calls").replaceChildren(h("div", { class: "muted" }, "No LLM calls.")); return; }
  const output = (c) => (typeof c.output === "string" ? c.output
    : Object.entries(c.output || {}).map(([k, v]) => `${k} ${num(v)}`).join(" · "));
  $("calls").replaceChildren(h("table", { class: "plain calls" }, h("thead", {}, h("tr", {}, h("th", {}, "#"),
    h("th", {}, "stage"), h("th", {}, "kind"), h("th", {}, "prompt tok"), h("th", {}, "out tok"), h("th", {}, "time"),
    h("th", {}, ""), h("th", {}, "output"))),
  h("tbody", {}, calls.map((c, i) => h("tr", {}, h("td", { class: "mono" }, i + 1), h("td", {}, c.stage),
    h("td", { class: "muted" }, c.kind), h("td", { class: "mono" }, num(c.prompt_tokens)),
    h("td", { class: "mono" }, num(c.completion_tokens)), h("td", { class: "mono" }, c.cached ? "–" : seconds(c.seconds)),
    h("td", {}, c.cached ? h("span", { class: "chip cached" }, "cached") : ""),
    h("td", {}, h("details", {}, h("summary", {}, clip(output(c), 90)),
      c.messages.map((m) => h("div", { class: "message" }, h("div", { class: "role" }, m.role), h("pre", {}, m.content))),
      h("div", { class: "message" }, h("div", { class: "role" }, "model"), h("pre", {}, output(c))))))))));
}

document.addEventListener("DOMContentLoaded", init);
