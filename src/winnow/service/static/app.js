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
    // A reranker that passed on only its top k keeps the whole order in ranked_ids.
    if (details.ranked_ids && !columns.includes(stage.name)) columns.push(stage.name);
    (details.ranked_ids || []).forEach((id, i) => {
      const row = rows.get(id);
      if (!row || row.scores[stage.name]) return;
      row.scores[stage.name] = { stage: stage.name, score: cutScore(stage, id), rank: i + 1 };
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

// Consecutive stages of one RRR round form a group; every other stage stands alone.
function stageGroups(trace) {
  const groups = [];
  trace.stages.forEach((stage, i) => {
    const round = stage.settings ? stage.settings.round : undefined;
    const last = groups[groups.length - 1];
    if (round != null && last && last.round === round) last.items.push([stage, i]);
    else groups.push({ round: round == null ? null : round, items: [[stage, i]] });
  });
  return groups;
}

function renderCost(result, trace) {
  const u = result.usage;
  const stat = (label, value) => h("div", { class: "stat" }, h("div", { class: "value mono" }, value),
    h("div", { class: "label muted small" }, label));
  const byName = new Map();  // RRR repeats its round's stages: time is summed per stage name
  for (const s of trace.stages) {
    const total = byName.get(s.name) || { seconds: 0, count: 0 };
    total.seconds += s.seconds;
    total.count += 1;
    byName.set(s.name, total);
  }
  const slowest = Math.max(0.001, ...[...byName.values()].map((t) => t.seconds));
  const reused = result.served_from === "answer-cache"
    ? h("div", { class: "muted small note" }, `Answered before (trace ${result.original_trace_id}): the figures are `
      + "those of the first computation; this request used no model time.") : "";  // not null: DOM prints "null"
  // The cache keeps each call's first price, so a cached answer can still say what it would cost.
  const firstPrice = u.cache_hits && u.cached_prompt_tokens !== undefined
    ? h("div", { class: "muted small note" }, `The ${num(u.cache_hits)} cached call(s) first cost `
      + `${num(u.cached_prompt_tokens)} prompt + ${num(u.cached_completion_tokens)} completion tokens and `
      + `${seconds(u.cached_seconds)} of model time.`) : "";
  $("cost").replaceChildren(reused, firstPrice,
    h("div", { class: "stats" }, stat("LLM calls", num(u.calls)), stat("cache hits", num(u.cache_hits)),
      stat("prompt tokens", num(u.prompt_tokens)), stat("completion tokens", num(u.completion_tokens)),
      stat("model time", seconds(u.seconds)), stat("wall time", seconds(result.seconds))),
    h("div", { class: "time-bars" }, [...byName.entries()].map(([name, t]) => h("div", { class: "time-row" },
      h("span", { class: "name" }, name, t.count > 1 ? h("span", { class: "muted small" }, ` ×${t.count}`) : null),
      h("div", { class: "track" }, h("div", { class: "fill", style: `width:${((100 * t.seconds) / slowest).toFixed(1)}%` })),
      h("span", { class: "mono small" }, seconds(t.seconds))))));
}

function renderStages(trace) {
  const jump = (i) => (ev) => { ev.preventDefault(); $(`stage-${i}`).scrollIntoView({ behavior: "smooth" }); };
  const calls = (stages) => stages.reduce((n, s) => n + s.llm_calls.length, 0);
  $("stages").replaceChildren(...stageGroups(trace).map((group) => {
    const stages = group.items.map(([s]) => s);
    const [first, at] = group.items[0];
    const label = group.round == null
      ? [h("span", { class: "stage-name" }, first.name), h("span", { class: "muted small" }, ` ${first.kind}`)]
      : [h("span", { class: "stage-name" }, `round ${group.round}`),
         h("span", { class: "muted small" }, ` ${stages.map((s) => s.name).join(" → ")}`)];
    const n = calls(stages);
    const shape = group.round == null ? `${first.input.length}→${first.output.length} · ` : "";
    return h("li", {}, h("a", { href: `#stage-${at}`, onclick: jump(at) }, label),
      h("span", { class: "muted small mono" }, `${shape}${n} call${n === 1 ? "" : "s"}`));
  }));
}

// ---- stage details: one renderer per kind of detail -------------------------------------------

// The score a reranker gave a passage it did not pass on: a trained reranker (cross-encoder,
// monot5) keeps every score by id; a pointwise reranker's LLM calls follow the input order, one per passage.
function cutScore(stage, id) {
  const kept = (stage.details || {}).scores;
  if ((stage.kind === "cross-encoder" || stage.kind === "monot5") && kept && id in kept) return kept[id];
  if (stage.llm_calls.length !== stage.input.length) return null;
  const call = stage.llm_calls[stage.input.findIndex((c) => c.id === id)];
  return call && call.output && typeof call.output === "object" ? call.output.True : null;
}

// A stage's whole order: what it passed on, then (a reranker keeping its top k) the rest, cut.
function stageRanking(stage) {
  const ranked = stage.output.map((c) => ({ id: c.id, score: c.score, cut: false }));
  for (const id of ((stage.details || {}).ranked_ids || []).slice(ranked.length)) {
    ranked.push({ id, score: cutScore(stage, id), cut: true });
  }
  return ranked;
}

function renderDetails(result, trace) {
  const docs = trace.documents || {};
  const context = {
    titleOf: (id) => (docs[id] || {}).title || id,
    // Stages are found by kind; their details follow the trace schema (winnow/details.py).
    judge: trace.stages.find((s) => s.kind === "noisy-document-judge"),
    bar: trace.stages.find((s) => s.kind === "adaptive-judge-bar" && s.details.tau != null),
    rounds: (trace.stages.find((s) => s.kind === "sort") || { details: {} }).details.rounds || [],
  };
  const heading = (stage, i, tag) => h(tag, {}, h("span", { class: "step" }, String(i + 1)), stage.name,
    h("span", { class: "muted small" },
      ` ${stage.kind} · ${stage.input.length} in → ${stage.output.length} out · ${seconds(stage.seconds)}`));
  const sections = stageGroups(trace).map((group) => {
    if (group.round == null) {
      const [stage, i] = group.items[0];
      return h("section", { class: "detail", id: `stage-${i}` }, heading(stage, i, "h3"), stageBody(stage, context, true));
    }
    const query = (group.items.find(([s]) => s.settings.query != null) || [{ settings: {} }])[0].settings.query;
    return h("section", { class: "detail round" },
      h("h3", {}, `Round ${group.round}`, h("span", { class: "muted small" }, " query "),
        group.round === 1 ? h("span", {}, query) : h("em", {}, query)),
      h("div", { class: "round-stages" }, group.items.map(([stage, i]) =>
        h("div", { class: "sub", id: `stage-${i}` }, heading(stage, i, "h4"), stageBody(stage, context, false)))));
  });
  $("details").replaceChildren(...sections);
}

function stageBody(stage, ctx, showSettings) {
  const d = stage.details || {};
  const parts = [];
  const settings = Object.entries(stage.settings || {}).filter(([k, v]) => v != null && v !== "" &&
    (showSettings || (k !== "round" && k !== "query")));
  if (settings.length) parts.push(h("div", { class: "kv small" }, settings.map(([k, v]) =>
    h("span", {}, h("span", { class: "muted" }, `${k} `), typeof v === "object" ? JSON.stringify(v) : String(v)))));
  const ranker = ["bm25", "dense", "hybrid", "pointwise-true", "embedding-cosine", "fusion", "cross-encoder",
    "monot5"].includes(stage.kind);
  if (ranker || (stage.name === "retrieve" && !d.grades)) parts.push(rankedList(stageRanking(stage), ctx.titleOf));
  if (stage.kind === "per-document-predictor") parts.push(perDocumentAnswers(d.answers, ctx));
  if (stage.kind === "adaptive-judge-bar" && d.tau != null) {
    parts.push(histogram(ctx.judge ? ctx.judge.details.scores : {}, d, ctx.titleOf));
  }
  if (stage.kind === "yes-no-judgment") parts.push(h("div", { class: "small" },
    Object.entries(d.decisions || {}).map(([id, said]) => h("div", { class: said === "Yes" ? "" : "out" },
      h("strong", {}, ctx.titleOf(id)), ` the judge said ${said}`))));
  if (stage.kind === "graded") parts.push(gradeTable(d.grades, ctx.titleOf));
  if (stage.kind === "sort") parts.push(roundsTable(d.rounds, ctx.titleOf));
  if (stage.kind === "listwise") parts.push(windowsList(d.windows, ctx.titleOf));
  if (stage.kind === "injection-guard") parts.push(flaggedList(d, ctx.titleOf));
  if (d.fitted && d.fitted.length) {
    parts.push(h("div", { class: "muted small" }, `${d.fitted.length} passage(s) shortened to fit the model's context`));
  }
  if (stage.kind === "threshold") parts.push(d.dropped.length ? h("div", { class: "dropped small" },
    d.dropped.map((x) => h("div", {}, h("strong", {}, ctx.titleOf(x.id)), ` ${x.note || ""}`)))
    : h("div", { class: "muted small" }, "nothing dropped"));
  if (d.fallback) parts.push(h("div", { class: "warn small" }, d.fallback));
  if (d.warning) parts.push(h("div", { class: "warn small" }, d.warning));
  if (stage.kind === "reader") parts.push(h("div", { class: "quote" }, d.answer));
  if (stage.kind === "rewriter") {
    const next = ctx.rounds.find((r) => r.round === stage.settings.round + 1);
    parts.push(h("div", { class: "quote" }, h("span", { class: "muted small" }, "next query: "),
      next ? next.query : "(not used: the loop stopped)"),
    h("details", { class: "small muted" }, h("summary", {}, "the model's raw rewrite"),
      h("pre", { class: "raw" }, stage.llm_calls.map((c) => c.output).join("\n"))));
  }
  return parts;
}

// The injection guard: each passage that reads like instructions to the model, the patterns found,
// and whether the guard moved it below the others (demote mode).
function flaggedList(d, titleOf) {
  const demoted = new Set(d.demoted || []);
  const rows = Object.entries(d.flagged || {});
  if (!rows.length) return h("div", { class: "muted small" }, `${d.mode}: no passage reads like instructions`);
  return h("div", { class: "dropped small" }, rows.map(([id, patterns]) => h("div", {},
    h("strong", {}, titleOf(id)), ` ${patterns.join(", ")}${demoted.has(id) ? " (demoted)" : ""}`)));
}

function rankedList(items, titleOf) {
  const scale = scaleFor(items.map((c) => c.score));
  return h("ol", { class: "ranked" }, items.slice(0, 20).map((c, i) => h("li", { class: c.cut ? "cut" : "" },
    h("span", { class: "mono small muted" }, `${i + 1}.`), h("span", { class: "t" }, titleOf(c.id)),
    h("div", { class: "bar" }, h("div", { style: `width:${(100 * Math.max(0, Math.min(1, scale(c.score)))).toFixed(1)}%` })),
    h("span", { class: "mono small" }, num(c.score)))));
}

function perDocumentAnswers(answers, { titleOf, judge, bar }) {
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
  // Bin edges are laid out from τ, so no bin holds both kept and dropped documents.
  const width = (x1 - x0) / Math.max(4, Math.min(12, Math.ceil(Math.sqrt(values.length) * 2)));
  const origin = d.tau - Math.ceil((d.tau - x0) / width) * width;
  const bins = Math.ceil((x1 - origin) / width);
  const counts = new Array(bins).fill(0);
  values.forEach((v) => { counts[Math.min(bins - 1, Math.floor((v - origin) / width + 1e-9))] += 1; });
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
    const from = Math.max(x0, origin + i * width), to = Math.min(x1, origin + (i + 1) * width);
    const barH = (plotH * c) / peak;
    chart.append(svg("rect", { x: x(from) + 1, y: top + plotH - barH, width: Math.max(1, x(to) - x(from) - 2),
                               height: barH, class: from >= d.tau - 1e-9 ? "bin kept" : "bin dropped" }));
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

function roundsTable(rounds, titleOf) {
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
