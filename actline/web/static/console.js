// actline console: plain JavaScript, no build step, nothing fetched from outside this server.
"use strict";

const $ = (sel, root) => (root || document).querySelector(sel);
const el = (tag, attrs, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "text") node.textContent = v;
    else if (k === "cls") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
};

const state = { cid: null, source: null, turns: {}, current: null, tab: "turn", lastTurn: null };

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    opts.headers["content-type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = { error: text }; }
  if (!res.ok) throw Object.assign(new Error((data && data.error) || res.statusText), { status: res.status });
  return data;
}

// -- money: USD as the terminal shows it (four decimals, "~" for an estimate) -----------------
function formatUsd(value, estimated) {
  const v = Number(value || 0), size = Math.abs(v), sign = v < 0 ? "-" : "";
  const text = size === 0 ? "$0" : size < 0.00005 ? `${sign}<$0.0001` : `${sign}$${size.toFixed(4)}`;
  return estimated ? `~${text}` : text;
}

function costText(cost) {
  // "cost $0.0123 · caching saved $0.0310" from a result's (or a stored turn's) cost
  if (!cost) return "";
  const est = !!cost.estimated;
  let text = `cost ${formatUsd(cost.total_usd, est)} · caching saved ${formatUsd(cost.saved_usd, est)}`;
  if (cost.priced_as) text += ` · priced as ${cost.priced_as}`;
  if (est) text += " · estimated: the model is not in the price table";
  return text;
}

// -- markdown (a small subset: headings, lists, code, emphasis, links) -------------------------
function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function inline(text, sources) {
  const byUrl = {};
  for (const s of sources || []) if (s.url) byUrl[s.url] = s.sid;
  let out = escapeHtml(text);
  out = out.replace(/`([^`]+)`/g, "<code>$1</code>");
  out = out.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>");
  out = out.replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>");
  const cite = (sid, label) => `<a data-testid="citation" class="citation" data-sid="${sid}" href="#source-${sid}">${label}</a>`;
  out = out.replace(/\[\[S:([0-9 ,\-]+)\]\]/gi, (m, body) => body.split(",").map((x) => x.trim()).filter(Boolean)
    .map((sid) => cite(sid, `[${sid}]`)).join(" "));
  out = out.replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (m, label, url) => {
    const raw = url.replace(/&amp;/g, "&");
    if (raw in byUrl) return cite(byUrl[raw], label);
    const safe = /^(https?:|#|\/)/.test(raw) ? url : "#";
    return `<a href="${safe}" rel="noreferrer" target="_blank">${label}</a>`;
  });
  return out;
}

function markdown(text, sources) {
  const lines = text.split("\n");
  const html = [];
  let list = null, code = null, para = [];
  const flush = () => {
    if (para.length) { html.push(`<p>${inline(para.join(" "), sources)}</p>`); para = []; }
    if (list) { html.push(`</${list}>`); list = null; }
  };
  for (const line of lines) {
    if (code !== null) {
      if (/^```/.test(line)) { html.push(`<pre><code>${escapeHtml(code.join("\n"))}</code></pre>`); code = null; }
      else code.push(line);
      continue;
    }
    if (/^```/.test(line)) { flush(); code = []; continue; }
    const h = line.match(/^(#{1,6})\s+(.*)$/);
    const ul = line.match(/^\s*[-*+]\s+(.*)$/);
    const ol = line.match(/^\s*\d+[.)]\s+(.*)$/);
    if (h) { flush(); html.push(`<h${h[1].length + 2}>${inline(h[2], sources)}</h${h[1].length + 2}>`); }
    else if (ul || ol) {
      if (para.length) { html.push(`<p>${inline(para.join(" "), sources)}</p>`); para = []; }
      const kind = ul ? "ul" : "ol";
      if (list !== kind) { if (list) html.push(`</${list}>`); html.push(`<${kind}>`); list = kind; }
      html.push(`<li>${inline((ul || ol)[1], sources)}</li>`);
    } else if (!line.trim()) flush();
    else { if (list) { html.push(`</${list}>`); list = null; } para.push(line); }
  }
  if (code !== null) html.push(`<pre><code>${escapeHtml(code.join("\n"))}</code></pre>`);
  flush();
  return html.join("\n");
}

// -- connection and conversations -----------------------------------------------------------
function showConnection(s) {
  const node = $("#connection");
  node.textContent = s;
  node.classList.toggle("down", s !== "connected");
}

// -- dates: local and short, as "today 14:02", "yesterday 09:15", "Nov 27", "Nov 27, 2025" --
function humanTime(ts) {
  if (!ts) return "-";
  const d = new Date(Number(ts) * 1000), now = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  const midnight = (x) => new Date(x.getFullYear(), x.getMonth(), x.getDate()).getTime();
  const days = Math.round((midnight(now) - midnight(d)) / 86400000);
  if (days === 0) return `today ${hm}`;
  if (days === 1) return `yesterday ${hm}`;
  const opts = { month: "short", day: "numeric" };
  if (d.getFullYear() !== now.getFullYear()) opts.year = "numeric";
  return d.toLocaleDateString("en-US", opts);
}

function listNote(text, error) {
  const note = $("#list-note");
  note.textContent = text;
  note.classList.toggle("error", !!error);
}

async function loadConversations() {
  const search = $("#conversation-search").value.trim();
  const query = search ? `?search=${encodeURIComponent(search)}` : "";
  let rows = [];
  try { rows = await api("GET", `/api/conversations${query}`); } catch (e) { listNote(e.message, true); return; }
  if ($("#conversation-search").value.trim() !== search) return;  // a newer search is on its way
  if (rows.length && rows[0].note) listNote(rows[0].note, false);  // read without a node: said
  const list = $("#conversation-list");
  const titles = Object.fromEntries(rows.map((r) => [r.conversation_id, r.title]));
  list.replaceChildren(...rows.map((r) => conversationItem(r, titles)));
  if (state.cid && titles[state.cid]) $("#current-conversation").textContent = `${titles[state.cid]} · ${state.cid}`;
  if (search && !rows.length) list.append(el("li", { cls: "muted empty", text: `no conversation has "${search}"` }));
}

function conversationItem(r, titles) {
  // a fork's cost is its own turns' (those before the fork are its parent's)
  const cid = r.conversation_id, parent = r.forked_from && r.forked_from[0];
  let cost = r.cost_usd === null || r.cost_usd === undefined ? "cost unknown" : formatUsd(r.cost_usd);
  if (parent) cost += " since the fork";
  const title = el("span", { cls: "title", "data-testid": "conversation-title", text: r.title || cid });
  const li = el("li", {
    "data-testid": "conversation-item", "data-cid": cid,
    cls: cid === state.cid ? "active" : "",
    onclick: () => openConversation(cid),
  }, title,
  el("span", { cls: "meta", "data-testid": "conversation-meta", text: `${r.turns} turn(s) · ${cost} · ${r.last_status || "-"}` }),
  el("span", { cls: "meta", "data-testid": "conversation-dates", title: `created ${new Date(r.created * 1000).toLocaleString()}, updated ${new Date(r.updated * 1000).toLocaleString()}`,
    text: `updated ${humanTime(r.updated)} · created ${humanTime(r.created)}` }),
  parent ? el("span", { cls: "meta", "data-testid": "forked-from", "data-cid": parent, title: `${parent} after turn ${r.forked_from[1]}`,
    text: `forked from ${titles[parent] || parent}` }) : "",
  el("span", { cls: "actions" },
    el("button", { type: "button", cls: "small", "data-testid": "rename", text: "rename", onclick: (e) => { e.stopPropagation(); renameItem(li, r); } }),
    el("button", { type: "button", cls: "small", "data-testid": "delete", text: "delete", onclick: (e) => { e.stopPropagation(); deleteItem(r); } })));
  return li;
}

function renameItem(li, r) {
  const input = el("input", { "data-testid": "rename-input", cls: "rename", value: r.title || "", "aria-label": "new title" });
  const save = async () => {
    const title = input.value.trim();
    if (!title || title === r.title) { loadConversations(); return; }
    try {
      await api("PATCH", `/api/conversations/${encodeURIComponent(r.conversation_id)}`, { title });
      listNote(`renamed: ${title}`);
    } catch (e) { listNote(`rename: ${e.message}`, true); }
    loadConversations();
  };
  input.addEventListener("click", (e) => e.stopPropagation());
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); save(); }
    else if (e.key === "Escape") loadConversations();
  });
  li.querySelector(".title").replaceWith(input);
  input.focus();
  input.select();
}

async function deleteItem(r) {
  const what = `Delete "${r.title || r.conversation_id}"? Its ${r.turns} turn(s), blocks, files and artifacts are removed for good.`;
  if (!window.confirm(what)) return;
  try {
    const d = await api("DELETE", `/api/conversations/${encodeURIComponent(r.conversation_id)}`);
    listNote(`deleted ${d.conversation_id}: ${d.turns} turn(s), ${d.blocks} block(s), ${d.files} file(s), ${d.artifacts} artifact(s)`);
    if (state.cid === r.conversation_id) openConversation(null);
  } catch (e) { listNote(`delete: ${e.message}`, true); }
  loadConversations();
}

async function forkAt(tid) {
  const cid = state.cid;
  try {
    const info = await api("POST", `/api/conversations/${encodeURIComponent(cid)}/fork`, { at: tid });
    listNote(`forked ${cid} after turn ${tid}: ${info.conversation_id}`);
    openConversation(info.conversation_id);
  } catch (e) { $("#ask-error").textContent = `fork: ${e.message}`; }
  loadConversations();
}

function forkButton(tid) {
  return el("button", { type: "button", cls: "small fork", "data-testid": "fork", text: "fork from here",
    title: "a new conversation with this one's turns up to this one", onclick: () => forkAt(tid) });
}

function listen(cid) {
  if (state.source) state.source.close();
  const source = new EventSource(`/events/${encodeURIComponent(cid || "console")}`);
  source.onmessage = (msg) => { try { onEvent(JSON.parse(msg.data)); } catch (e) { console.error(e); } };
  source.onerror = () => showConnection("reconnecting (to the console)");
  state.source = source;
}

function openConversation(cid) {
  state.cid = cid;
  state.turns = {};
  state.current = null;
  $("#turn").replaceChildren();
  $("#history").replaceChildren();
  $("#current-conversation").textContent = cid ? `conversation ${cid}` : "new conversation";
  for (const li of document.querySelectorAll("#conversation-list li")) li.classList.toggle("active", li.dataset.cid === cid);
  listen(cid);
  if (cid) loadHistory(cid);
  if (state.tab === "timeline") loadTimeline();
}

async function loadHistory(cid) {
  // the stored turns (prompt and answer); turns this console follows show live instead
  let rows = [];
  try { rows = await api("GET", `/api/conversations/${cid}/turns`); } catch (e) { return; }
  if (state.cid !== cid) return;
  const past = rows.filter((t) => !state.turns[t.turn_id]).map((t) => {
    const answer = el("div", { cls: "answer" });
    answer.innerHTML = markdown(t.answer, []);
    for (const a of answer.querySelectorAll("[data-testid]")) a.removeAttribute("data-testid");
    return el("div", { cls: "turn past", "data-turn": t.turn_id },
      el("div", { cls: "head" }, el("span", { cls: "muted", text: `turn ${t.turn_id}` }), forkButton(t.turn_id)),
      el("div", { cls: "prompt", text: t.prompt }), answer,
      el("div", { cls: "usage cost", "data-testid": "past-cost", text: t.cost ? costText(t.cost) : "cost: not finished" }));
  });
  $("#history").prepend(...past);
}

// -- a live turn ------------------------------------------------------------------------------
function archive(view) {
  // an earlier turn keeps its content but gives up the test ids of the live view
  for (const node of view.root.querySelectorAll("[data-testid]")) {
    node.dataset.pastTestid = node.dataset.testid;
    node.removeAttribute("data-testid");
  }
  $("#history").append(view.root);
}

function turnView(tid) {
  if (state.turns[tid]) return state.turns[tid];
  const stored = document.querySelector(`#history .turn.past[data-turn="${tid}"]`);
  if (stored) stored.remove();
  if (state.current && state.turns[state.current]) archive(state.turns[state.current]);
  const root = el("div", { cls: "turn", "data-turn": tid });
  const status = el("span", { "data-testid": "turn-status", cls: "status", text: "running" });
  const view = {
    tid, root, status, answerText: "", sources: [], canvas: {}, thinking: null, planBoxes: {}, retries: [],
    cards: el("div", { cls: "cards" }),
    answer: el("div", { "data-testid": "answer", cls: "answer" }),
    sourceList: el("ol", { cls: "sources" }),
    followups: el("div", { cls: "followups" }),
    panels: el("div", { cls: "panels" }),
    usage: el("div", { cls: "usage" }),
  };
  view.head = el("div", { cls: "head" }, el("span", { cls: "muted", text: `turn ${tid}` }), status);
  root.append(view.head,
    view.cards, view.panels, view.answer, view.sourceList, view.followups, view.usage);
  $("#turn").append(root);
  state.turns[tid] = view;
  state.current = tid;
  state.lastTurn = tid;
  $("#trace-turn").value = tid;
  return view;
}

const LABELS = { thinking: "thinking", tool_call: "tool call", tool_result: "tool result", plan: "plan", note: "note", waiting: "waiting", notice: "notice", complete: "complete" };
const PLAN_TOOLS = ["react.plan", "react.note", "react.notes"];
const ENDED = ["completed", "failed", "cancelled", "budget_exhausted", "protocol_failed"];

function settle(view) {
  // a turn that went on (or ended) leaves its waiting cards' buttons inert
  for (const b of view.cards.querySelectorAll('.card[data-kind="waiting"] button')) b.disabled = true;
}

function paramsText(params) {
  // "query: pricing tiers · top_k: 3"
  return Object.entries(params || {}).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join(" · ");
}

function approvalRow(view, item) {
  const said = el("span", { cls: "verdict muted" });
  const buttons = [];
  const decide = async (what) => {
    for (const b of buttons) b.disabled = true;
    said.textContent = what === "approve" ? "approving…" : "denying…";
    try {
      await api("POST", `/api/turns/${view.tid}/${what}`, { approval_id: item.approval_id, reason: `${what} in the console` });
      said.textContent = what === "approve" ? "approved" : "denied";
    } catch (e) {
      said.textContent = "";
      $("#ask-error").textContent = `${what}: ${e.message}`;
      // refused by the node (decided already, no longer waiting): the buttons stay off
      if (e.status !== 409 && !ENDED.includes(view.status.textContent)) for (const b of buttons) b.disabled = false;
    }
  };
  buttons.push(el("button", { type: "button", "data-testid": "approve", text: "Approve", onclick: () => decide("approve") }),
    el("button", { type: "button", "data-testid": "deny", text: "Deny", onclick: () => decide("deny") }));
  return el("div", { cls: "row approval", "data-approval": item.approval_id },
    el("span", { cls: "ask" }, el("code", { text: item.tool }), el("span", { "data-testid": "approval-params", text: ` ${paramsText(item.params)}` })),
    ...buttons, said);
}

function addCard(view, ev) {
  const kind = ev.card_kind || ev.phase;
  const card = el("div", { "data-testid": "card", "data-kind": kind, cls: "card" });
  const label = el("span", { cls: "label", text: LABELS[kind] || kind });
  const approvals = (kind === "waiting" && ev.data && ev.data.approvals) || [];
  if (kind !== "waiting") settle(view);
  retry(view);
  if (kind === "thinking") {
    const body = el("div", { cls: "stream" });
    card.append(el("details", {}, el("summary", {}, label, el("span", { text: ev.detail || "" })), body));
    view.thinking = body;
  } else {
    // an approval's call is shown once, in its row below (the detail repeats its arguments)
    const detail = approvals.length ? `waiting for approval of ${approvals.length} call(s)` : ev.detail || "";
    card.append(label, el("span", { cls: "detail", text: detail }));
    view.thinking = null;
  }
  const data = Object.fromEntries(Object.entries(ev.data || {}).filter(([k]) => k !== "context" && k !== "approvals"));
  if (Object.keys(data).length) {
    card.append(el("details", { cls: "data" }, el("summary", { text: "details" }), el("pre", { text: JSON.stringify(data, null, 2) })));
  }
  if (["tool_call", "tool_result", "plan", "note"].includes(kind) && ev.round && state.cid) {
    const calls = el("div", { cls: "calls" });
    card.append(calls);
    if (kind === "plan" || kind === "note") view.planBoxes[ev.round] = calls;
    const planBox = view.planBoxes[ev.round];
    if (kind === "tool_result" && planBox) {
      // the plan card was drawn before its call ran: now it has its result
      showCalls(view, planBox, ev.round, false, true);
      showCalls(view, calls, ev.round, true, true);
    } else if (kind !== "tool_call") showCalls(view, calls, ev.round, false, kind === "tool_result");
    else card.append(el("button", { type: "button", cls: "small", text: "arguments", onclick: () => showCalls(view, calls, ev.round, false, false) }));
  }
  if (kind === "waiting") {
    for (const item of approvals) card.append(approvalRow(view, item));
    card.append(el("div", { cls: "row" },
      el("button", { type: "button", "data-testid": "skip", text: "Skip waiting", onclick: () => control(view, "skip") }),
      el("button", { type: "button", "data-testid": "cancel", text: "Cancel turn", onclick: () => control(view, "cancel") })));
    view.status.textContent = "waiting";
  } else if (kind !== "complete" && !ENDED.includes(view.status.textContent)) {
    view.status.textContent = "running";
  }
  view.cards.append(card);
}

function planView(c) {
  // a plan's steps as a list, once (its arguments and its JSON result say the same): the
  // result's (numbered, with their state) once it ran, else the arguments'
  const p = c.params || {}, result = c.results[0];
  const steps = (result && result.steps) || (Array.isArray(p.steps) ? p.steps : []);
  return el("div", { cls: "plan", "data-testid": "plan" },
    el("div", { cls: "muted", text: `${c.tool} ${p.mode || ""}`.trim() }),
    el("ul", {}, ...steps.map((step) => el("li", { text: String(step) }))),
    ...(result ? [el("span", { cls: "path-link", "data-testid": "result-path", text: result.path, onclick: (e) => openInline(e.target, result.path) }),
      el("pre", { cls: "preview hidden" })] : []));
}

function retry(view) {
  // the round calls read before the store had them, read again (the turn went on)
  const again = view.retries;
  view.retries = [];
  for (const show of again) show();
}

async function showCalls(view, box, round, skipPlans, wantResults) {
  // the round's calls with their results; a tool result card leaves out the plans its
  // round's plan card shows. A card can come before the store has its round's results:
  // those are read again with the turn's next event.
  let rows = [];
  try { rows = await api("GET", `/api/turns/${view.tid}/rounds/${round}/calls?conversation_id=${state.cid}`); }
  catch (e) { box.textContent = e.message; return; }
  if (wantResults && (!rows.length || rows.some((c) => !c.results.length)) && !ENDED.includes(view.status.textContent)) {
    view.retries.push(() => showCalls(view, box, round, skipPlans, true));
  }
  const shown = skipPlans ? rows.filter((c) => !PLAN_TOOLS.includes(c.tool)) : rows;
  if (!shown.length && rows.length) { box.replaceChildren(el("div", { cls: "muted", text: "shown in the plan above" })); return; }
  box.replaceChildren(...shown.map((c) => {
    if (c.tool === "react.plan") return el("div", { cls: "call", "data-testid": "tool-call" }, planView(c));
    return el("div", { cls: "call", "data-testid": "tool-call" },
      el("div", { cls: "muted args", text: `${c.tool || c.call_id} ${paramsText(c.params)}`.slice(0, 400) }),
      ...c.results.map((r) => el("div", { cls: "result" },
        el("span", { cls: "path-link", "data-testid": "result-path", text: r.path, onclick: (e) => openInline(e.target, r.path) }),
        el("pre", { cls: /^[[{]/.test(r.preview) ? "preview json" : "preview", "data-testid": "result-preview", text: r.preview }))));
  }));
}

async function openInline(node, path) {
  const box = node.parentElement.querySelector(".preview");
  box.classList.remove("hidden");
  try {
    const data = await api("GET", `/api/conversations/${state.cid}/read?path=${encodeURIComponent(path)}`);
    box.textContent = data.text || data.error;
  } catch (e) { box.textContent = e.message; }
}

async function control(view, what) {
  try { await api("POST", `/api/turns/${view.tid}/${what}`, { conversation_id: state.cid }); }
  catch (e) { $("#ask-error").textContent = `${what}: ${e.message}`; }
}

function panel(view, ev) {
  let p = view.canvas[ev.key];
  if (!p) {
    const body = el("div", { cls: "body" });
    const node = el("div", { "data-testid": "canvas-panel", "data-key": ev.key, cls: "canvas" }, el("h4", { text: ev.key }), body);
    view.panels.append(node);
    p = view.canvas[ev.key] = { node, body, text: "", format: ev.format };
  }
  if (ev.replace) p.text = "";
  p.text += ev.text || "";
  if (ev.format) p.format = ev.format;
  p.body.classList.toggle("markdown", p.format === "markdown");  // its own HTML lays it out
  if (p.format === "markdown") p.body.innerHTML = markdown(p.text, view.sources);
  else p.body.textContent = p.text;
  if (ev.completed && ev.unresolved && ev.unresolved.length) p.body.append(el("div", { cls: "error", text: `no source for ${ev.unresolved.join(", ")}` }));
}

function delta(view, ev) {
  if (ev.key) return panel(view, ev);
  if (ev.channel === "thinking" && ev.text) {
    if (!view.thinking) addCard(view, { phase: "thinking", detail: "" });
    view.thinking.textContent += ev.text;
  } else if (ev.channel === "answer" && ev.text) {
    view.answerText += ev.text;
    view.answer.innerHTML = markdown(view.answerText, view.sources);
  } else if (ev.completed && ev.unresolved && ev.unresolved.length) {
    view.cards.append(el("div", { "data-testid": "card", "data-kind": "notice", cls: "card", text: `${ev.channel}: no source for citation(s) ${ev.unresolved.join(", ")}` }));
  }
}

function result(view, ev) {
  view.status.textContent = ev.status;
  view.sources = ev.sources || [];
  const text = ev.answer || view.answerText;
  view.answer.innerHTML = markdown(text, view.sources);
  if (ev.error) view.answer.append(el("div", { cls: "error", text: ev.error }));
  view.sourceList.replaceChildren(...view.sources.map((s) => el("li", { "data-testid": "source", "data-sid": String(s.sid), id: `source-${s.sid}`, value: String(s.sid) },
    el("a", { href: s.url || "#", target: "_blank", rel: "noreferrer", text: s.title || s.url || `source ${s.sid}` }),
    el("span", { cls: "muted", text: s.text ? ` — ${s.text.slice(0, 160)}` : "" }))));
  view.followups.replaceChildren(...(ev.followups || []).map((q) => el("button", { type: "button", "data-testid": "followup-button", text: q, onclick: () => send(q) })));
  const u = ev.usage || {};
  view.usage.replaceChildren(el("span", { "data-testid": "usage", text: `tokens ${ev.prompt_tokens || 0} in / ${u.output_tokens || 0} out · cache read ${ev.cache_read_pct || 0}% · ${ev.rounds} round(s)` }));
  if (ev.cost) view.usage.append(el("div", { "data-testid": "cost", cls: "cost", text: costText(ev.cost) }));
  settle(view);
  retry(view);
  if (!view.head.querySelector(".fork")) view.status.before(forkButton(view.tid));
  loadConversations();
}

function onEvent(ev) {
  if (ev.type === "connection") return showConnection(ev.state);
  if (!ev.turn_id || (state.cid && ev.conversation_id !== state.cid)) return;
  const view = turnView(ev.turn_id);
  if (ev.type === "card") addCard(view, ev);
  else if (ev.type === "delta") delta(view, ev);
  else if (ev.type === "result") result(view, ev);
}

function running() {
  const view = state.current && state.turns[state.current];
  return view && ["running", "waiting"].includes(view.status.textContent) ? view : null;
}

async function readFiles() {
  const files = Array.from($("#attach").files || []);
  return Promise.all(files.map((f) => new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve({ name: f.name, content_b64: String(reader.result).split(",", 2)[1] || "" });
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(f);
  })));
}

function settings() {
  // the turn settings typed for new turns (kept for the next ones); null when none
  const raw = $("#settings").value.trim();
  if (!raw) return null;
  let config;
  try { config = JSON.parse(raw); } catch (e) { throw new Error(`turn settings are not JSON: ${e.message}`); }
  if (!config || typeof config !== "object" || Array.isArray(config)) throw new Error('turn settings must be a JSON object, as {"profile": "fast"}');
  return config;
}

async function send(text) {
  $("#ask-error").textContent = "";
  if (!text.trim()) return;
  try {
    const live = running();
    const attachments = await readFiles();
    if (live) {
      // the picked files go with the followup; they stay picked if it is refused
      await api("POST", `/api/turns/${live.tid}/followup`, { conversation_id: state.cid, text, attachments });
      const names = attachments.map((a) => a.name).join(", ");
      const note = names ? `followup sent: ${text} (attached: ${names})` : `followup sent: ${text}`;
      live.cards.append(el("div", { "data-testid": "card", "data-kind": "note", cls: "card", text: note }));
    } else {
      const body = { text, attachments };
      const config = settings();
      if (config) body.config = config;
      if (state.cid) body.conversation_id = state.cid;
      const out = await api("POST", "/api/turns", body);
      if (out.conversation_id !== state.cid) { openConversation(out.conversation_id); }
      turnView(out.turn_id);
      loadConversations();
    }
    $("#attach").value = "";
    $("#attached").textContent = "";
    $("#prompt").value = "";
  } catch (e) { $("#ask-error").textContent = e.message; }
}

// -- timeline, agents, traces -----------------------------------------------------------------
async function loadTimeline() {
  const body = $("#timeline tbody");
  $("#path-view").classList.add("hidden");
  $("#view-timeline").append($("#path-view"));
  if (!state.cid) { body.replaceChildren(); $("#timeline-note").textContent = "pick a conversation"; return; }
  let data;
  try { data = await api("GET", `/api/conversations/${state.cid}/timeline`); }
  catch (e) { $("#timeline-note").textContent = e.message; return; }
  $("#timeline-note").textContent = `${data.blocks.length} blocks`;
  body.replaceChildren(...data.blocks.map((b) => el("tr", { "data-testid": "block", "data-path": b.path, "data-state": b.state },
    el("td", { text: String(b.seq) }), el("td", { text: b.type }),
    el("td", {}, b.path ? el("span", { cls: "path-link", "data-testid": "block-path", text: b.path, onclick: (e) => openPath(b.path, e.target.closest("tr")) }) : ""),
    el("td", { text: b.state }), el("td", { text: (b.text || "").slice(0, 160) }))));
  const r = data.rendered;
  $("#rendered-note").textContent = `${r.stable_tokens} cached + ${r.tail_tokens} tail tokens`;
  const out = [];
  for (const part of r.parts) {
    out.push(el("div", { cls: part.cached ? "part" : "part tail", text: (part.label ? `[${part.label}] ` : "") + part.text }));
    for (const m of r.cache_marks) if (m.after_part === part.index && part.cached) out.push(el("span", { "data-testid": "cache-mark", cls: "cache-mark", text: m.label }));
  }
  const shown = out.filter((n) => n.dataset.testid === "cache-mark").length;
  for (const m of r.cache_marks.slice(shown)) out.push(el("span", { "data-testid": "cache-mark", cls: "cache-mark", text: m.label }));
  $("#rendered").replaceChildren(...out);
}

async function openPath(path, row) {
  const view = $("#path-view");
  if (row) {  // opened in place: a row under the block's row
    const old = $("#path-row");
    if (old) old.remove();
    const cell = el("td", { colspan: "5" });
    const holder = el("tr", { id: "path-row" }, cell);
    cell.append(view);
    row.after(holder);
  }
  try {
    const data = await api("GET", `/api/conversations/${state.cid}/read?path=${encodeURIComponent(path)}`);
    view.textContent = `${data.path}\n\n${data.text || data.error}`;
  } catch (e) { view.textContent = e.message; }
  view.classList.remove("hidden");
}

async function loadAgents() {
  let rows = [];
  try { rows = await api("GET", "/api/agents"); } catch (e) { $("#done-result").textContent = e.message; }
  $("#agents tbody").replaceChildren(...rows.map((a) => el("tr", { "data-testid": "agent", "data-name": a.name, "data-present": String(a.present) },
    el("td", { text: a.name }), el("td", { text: a.present ? "yes" : "no" }),
    el("td", {}, ...a.open_tasks.map((t) => el("div", { cls: "path-link", "data-testid": "open-task", text: `${t.task_id} (turn ${t.turn_id}) ${t.text || ""}`,
      onclick: () => { $("#done-agent").value = a.name; $("#done-task").value = t.task_id; $("#done-turn").value = t.turn_id; } }))))));
  if (rows.length && !$("#done-agent").value) $("#done-agent").value = rows[0].name;
}

async function sendDone(event) {
  event.preventDefault();
  const name = $("#done-agent").value.trim();
  const out = $("#done-result");
  try {
    const r = await api("POST", `/api/agents/${encodeURIComponent(name)}/done`, {
      task_id: $("#done-task").value.trim() || null, turn_id: $("#done-turn").value.trim() || null, summary: $("#done-summary").value });
    out.className = ""; out.textContent = `accepted: ${r.detail || "the DONE was applied"}`;
    loadAgents();
  } catch (e) { out.className = "error"; out.textContent = `refused: ${e.message}`; }
}

function spanLabel(s) {
  // the span's name and what it is about (a tool's name, a model, a round), its duration, the
  // model calls' cost, and how many events it has
  const a = s.attrs || {};
  let text = s.name;
  if (a.tool) text += ` ${a.tool}`;
  else if (s.name === "model" && a.model) text += ` ${a.model}`;
  else if (s.name === "round" && a.round !== undefined) text += ` ${a.round}`;
  text += ` · ${Number(s.duration_ms || 0).toFixed(1)} ms`;
  if ("actline.cost.usd" in a) text += ` · ${formatUsd(a["actline.cost.usd"], !!a["actline.cost.estimated"])}`;
  const events = (s.events || []).length;
  if (events) text += ` · ${events} event(s)`;
  return text;
}

function spanTree(spans) {
  // the spans depth first (children by start time), each with its depth
  const ids = new Set(spans.map((s) => s.span_id));
  const children = {};
  for (const s of spans) {
    const parent = s.parent_id && ids.has(s.parent_id) ? s.parent_id : "";
    (children[parent] = children[parent] || []).push(s);
  }
  const out = [];
  const walk = (parent, depth) => {
    for (const s of (children[parent] || []).sort((a, b) => a.offset_ms - b.offset_ms)) {
      out.push([s, depth]);
      walk(s.span_id, depth + 1);
    }
  };
  walk("", 0);
  return out;
}

async function loadTrace() {
  const tid = $("#trace-turn").value.trim() || state.lastTurn;
  const chart = $("#trace");
  if (!tid) { $("#trace-note").textContent = "run a turn first"; return; }
  let data;
  try { data = await api("GET", `/api/turns/${tid}/trace`); }
  catch (e) { $("#trace-note").textContent = e.message; chart.replaceChildren(); return; }
  const spans = data.spans;
  const total = Math.max(1, ...spans.map((s) => s.offset_ms + (s.duration_ms || 0)));
  const root = spans.find((s) => !s.parent_id) || {};
  const ra = root.attrs || {}, est = !!ra["actline.cost.estimated"];
  const cost = "actline.cost.usd" in ra ? `, cost ${formatUsd(ra["actline.cost.usd"], est)}` : "";
  const saved = "actline.cost.uncached_usd" in ra ? `, caching saved ${formatUsd(ra["actline.cost.uncached_usd"] - ra["actline.cost.usd"], est)}` : "";
  $("#trace-note").textContent = `${spans.length} spans, ${total.toFixed(0)} ms, status ${data.session.status}${cost}${saved}`;
  // each span a row: its label (indented by its depth) beside its bar on the time axis
  chart.replaceChildren(...spanTree(spans).map(([s, depth]) => {
    const left = (100 * s.offset_ms) / total, width = Math.max(0.2, (100 * (s.duration_ms || 0)) / total);
    const tip = JSON.stringify({ ...(s.attrs || {}), events: s.events || [] });
    return el("div", { "data-testid": "span", "data-name": s.name, "data-depth": String(depth), cls: "span", title: tip },
      el("div", { cls: "span-label", "data-testid": "span-label", style: `padding-left:${0.3 + depth * 1.1}rem`, text: spanLabel(s) }),
      el("div", { cls: "track" }, el("div", { cls: s.status && s.status !== "ok" ? "bar error" : "bar", style: `left:${left}%;width:${width}%` })));
  }));
}

function showTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const v of document.querySelectorAll(".view")) v.classList.toggle("hidden", v.id !== `view-${tab}`);
  if (tab === "timeline") loadTimeline();
  if (tab === "agents") loadAgents();
  if (tab === "traces") loadTrace();
}

document.addEventListener("DOMContentLoaded", () => {
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("#ask").addEventListener("submit", (e) => { e.preventDefault(); send($("#prompt").value); });
  $("#prompt").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send($("#prompt").value); } });
  $("#attach").addEventListener("change", () => { $("#attached").textContent = Array.from($("#attach").files).map((f) => f.name).join(", "); });
  $("#new-conversation").addEventListener("click", () => openConversation(null));
  let typing = null;
  $("#conversation-search").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(loadConversations, 250); });
  $("#timeline-refresh").addEventListener("click", loadTimeline);
  $("#agents-refresh").addEventListener("click", loadAgents);
  $("#trace-load").addEventListener("click", loadTrace);
  $("#done-form").addEventListener("submit", sendDone);
  if (window.location.search.includes("token=")) window.history.replaceState(null, "", "/");
  const wanted = new URLSearchParams(window.location.hash.slice(1)).get("cid");
  openConversation(wanted || null);
  loadConversations();
});
