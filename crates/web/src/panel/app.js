// The Troupe panel: plain JavaScript, no build step, no network beyond this server.
// Everything is drawn with textContent (never innerHTML): logged text is untrusted.
"use strict";

const token = new URLSearchParams(location.search).get("token");
// `follow`: the panel chose the Team itself (no session in the URL), so it moves on to a newer
// Team when one starts; any choice of the user's (the picker, a member, the URL) ends that.
const state = { sessions: [], lead: null, member: null, view: null, teamSource: null, convSource: null, follow: false, autoHash: null };
// The timeline slider (`travel`): `timeline` is the Team events of the Lead log (`/team/timeline`); the
// slider's last stop is "live". `past` is the stop shown when it is not live, `pastView` the
// Team at that event (`/team/show?at=SEQ`), `liveMessages` the receipts of the whole log.
const travel = { timeline: [], past: null, pastView: null, liveMessages: [], request: 0, refreshing: false, again: false };

function api(path) {
  return token ? `${path}${path.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}` : path;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function showError(message) {
  const banner = document.getElementById("error");
  banner.textContent = message;
  banner.hidden = !message;
}

window.addEventListener("error", (event) => showError(`The panel hit an error: ${event.message}`));
window.addEventListener("unhandledrejection", (event) => showError(`The panel hit an error: ${event.reason}`));

function setConnection(stateName, text) {
  const node = document.getElementById("connection");
  node.dataset.state = stateName;
  node.textContent = text;
}

async function getJson(path) {
  const response = await fetch(api(path), { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const message = body && body.error ? `${body.error.message} (${body.error.code})` : `HTTP ${response.status}`;
    throw new Error(message);
  }
  return body;
}

function ago(ms) {
  const seconds = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)}h ago`;
  return new Date(ms).toISOString().slice(0, 16).replace("T", " ");
}

// ---- routing: #<lead> or #<lead>/<member> ----

function route() {
  const [lead, member] = decodeURIComponent(location.hash.slice(1)).split("/");
  return { lead: lead || null, member: member || null };
}

function go(lead, member, auto = false) {
  const hash = member && member !== lead ? `#${lead}/${member}` : `#${lead}`;
  state.follow = auto;
  state.autoHash = auto ? hash : null;
  if (location.hash !== hash) location.hash = hash;
  else apply();
}

// The Team started last (the root created last), or null.
function newestRoot() {
  const roots = state.sessions.filter((s) => s.role === "lead");
  return roots.reduce((best, s) => (!best || s.createdAt > best.createdAt ? s : best), null);
}

// ---- the session list ----

async function loadSessions() {
  try {
    const body = await getJson("/api/sessions");
    state.sessions = body.sessions;
    drawSessions();
    return true;
  } catch (error) {
    showError(`Cannot list the sessions: ${error.message}`);
    return false;
  }
}

function drawSessions() {
  const select = document.getElementById("session-select");
  const roots = state.sessions.filter((s) => s.role === "lead");
  const wanted = state.lead;
  select.replaceChildren(
    ...roots.map((s) => {
      const team = !s.team ? "no team" : s.teamSize ? `lead + ${s.teamSize} teammate${s.teamSize === 1 ? "" : "s"}` : "lead, no teammates yet";
      return el("option", { value: s.id, text: `${s.id.slice(0, 8)} · ${team} · ${ago(s.lastActivity)} · ${s.cwd || ""}` });
    }),
  );
  if (wanted && !roots.some((s) => s.id === wanted)) {
    select.append(el("option", { value: wanted, text: wanted }));
  }
  if (wanted) select.value = wanted;
}

// ---- the Team ----

function apply() {
  let { lead, member } = route();
  if (!lead) {
    const root = state.sessions.find((s) => s.role === "lead"); // the most recently active
    if (!root) {
      showEmpty("No sessions yet. Start one with troupe run --team or troupe demo; it appears here.");
      return;
    }
    go(root.id, null, true);
    return;
  }
  // A teammate's or other child session's link opens its Lead's Team with that member selected.
  const row = state.sessions.find((s) => s.id === lead);
  if (row && (row.role === "teammate" || row.role === "child") && row.parent) {
    go(row.parent, lead);
    return;
  }
  if (lead !== state.lead) openTeam(lead);
  openConversation(member || lead);
  drawSessions();
}

function showEmpty(text) {
  const empty = document.getElementById("empty");
  empty.textContent = text;
  empty.hidden = !text;
  document.getElementById("team").hidden = Boolean(text);
}

function openTeam(lead) {
  if (state.teamSource) state.teamSource.close();
  state.lead = lead;
  document.getElementById("approval-list").replaceChildren();
  approvalNote("");
  document.getElementById("approvals").hidden = true;
  loadApprovals();
  state.view = null;
  travel.timeline = [];
  travel.past = null;
  travel.pastView = null;
  travel.liveMessages = [];
  travel.request += 1;
  drawTimeline();
  showEmpty("Loading…");
  setConnection("idle", "connecting…");
  const source = new EventSource(api(`/api/sessions/${encodeURIComponent(lead)}/team/events`));
  state.teamSource = source;
  source.addEventListener("team", (event) => {
    state.view = JSON.parse(event.data);
    showError("");
    showEmpty("");
    setConnection("live", "live");
    drawTeam();
    refreshHistory();
  });
  source.addEventListener("open", () => setConnection("live", "live"));
  source.addEventListener("error", async () => {
    if (source !== state.teamSource) return;
    setConnection("down", "reconnecting…");
    if (source.readyState === EventSource.CLOSED) {
      // The server refused the stream: say why (an unknown session, a missing token, …).
      try {
        await getJson(`/api/sessions/${encodeURIComponent(lead)}/team`);
      } catch (error) {
        showEmpty(`Cannot show session ${lead}: ${error.message}`);
        setConnection("down", "stopped");
      }
    }
  });
}

const COLUMNS = [
  { title: "Pending", statuses: ["pending"] },
  { title: "In progress", statuses: ["in_progress"] },
  { title: "Completed", statuses: ["completed"] },
];

// One mark per meaning: ⊘ blocked (waiting for its blockers) is not ⚠ (a write-scope overlap),
// and neither is ◷ (a task in progress whose owner stalled).
const OVERLAP_MARK = "⚠";
const STALL_MARK = "◷";

// Why a task is stalled, in words (the view's `stalled`: reason and the owner's last event).
function stallText(task) {
  const owner = task.ownerName || "its owner";
  const why = {
    failed: `${owner} failed`,
    inactive: `${owner} is inactive and no followup_task waits for it`,
    no_activity: `${owner} has logged nothing for a while`,
  }[task.stalled.reason] || task.stalled.reason;
  const since = task.stalled.since ? ` · last active ${new Date(task.stalled.since).toISOString().replace(".000Z", "Z")}` : "";
  return `${STALL_MARK} stalled: ${why}${since} — reassign it or wake ${owner}`;
}

function taskState(task) {
  if (task.status === "completed") return { key: "done", icon: "✓", label: "completed" };
  if (task.status === "in_progress") return { key: "ongoing", icon: "◐", label: "in progress" };
  if (task.ready) return { key: "ready", icon: "○", label: "ready" };
  return { key: "blocked", icon: "⊘", label: "blocked" };
}

// Text with a line-break chance after each `/`, `:`, `-`, `_` and `.`, so a long path (a
// script model, a workspace) wraps between its parts instead of in the middle of a word.
function breakable(text) {
  const node = document.createDocumentFragment();
  for (const part of String(text).split(/(?<=[/:_.-])/)) {
    node.append(document.createTextNode(part), document.createElement("wbr"));
  }
  return node;
}

// ---- the timeline: the Team at any past event ----

// Reads the timeline and the live receipts again (after a frame: something changed); one
// refresh at a time, and one more if a frame came during it.
async function refreshHistory() {
  if (travel.refreshing) { travel.again = true; return; }
  travel.refreshing = true;
  const lead = state.lead;
  try {
    do {
      travel.again = false;
      const [events, show] = await Promise.all([
        getJson(`/api/sessions/${encodeURIComponent(lead)}/team/timeline`),
        getJson(`/api/sessions/${encodeURIComponent(lead)}/team/show`),
      ]);
      if (lead !== state.lead) return;
      travel.timeline = events.events;
      travel.liveMessages = show.messages;
      drawTimeline();
      if (travel.past === null) drawTeam();
    } while (travel.again);
  } catch (error) {
    showError(`Cannot read this Team's timeline: ${error.message}`);
  } finally {
    travel.refreshing = false;
  }
}

function drawTimeline() {
  const slider = document.getElementById("timeline-slider");
  const stops = travel.timeline.length;
  slider.max = String(stops);
  slider.disabled = stops === 0;
  slider.value = String(travel.past === null ? stops : travel.past);
  document.getElementById("timeline-live").disabled = travel.past === null;
  const label = document.getElementById("timeline-label");
  if (travel.past === null) {
    label.textContent = stops ? `live · ${stops} Team event${stops === 1 ? "" : "s"}` : "live · no Team events yet";
  } else {
    const entry = travel.timeline[travel.past];
    label.textContent = `event ${travel.past + 1} of ${stops} · seq ${entry.seq} · ${new Date(entry.time).toLocaleTimeString()} · ${entry.text}`;
  }
  const team = document.getElementById("team");
  team.dataset.past = travel.past === null ? "false" : "true";
}

// The slider moved: its last stop is live, any other the Team right after that event.
async function moveTimeline(value) {
  const index = Number(value);
  if (index >= travel.timeline.length) {
    travel.past = null;
    travel.pastView = null;
    travel.request += 1;
    drawTimeline();
    drawTeam();
    return;
  }
  travel.past = index;
  drawTimeline();
  const entry = travel.timeline[index];
  const request = ++travel.request;
  const lead = state.lead;
  try {
    const body = await getJson(`/api/sessions/${encodeURIComponent(lead)}/team/show?at=${entry.seq}`);
    if (request !== travel.request || lead !== state.lead) return;
    travel.pastView = pastView(body);
    drawTeam();
  } catch (error) {
    showError(`Cannot show the Team at seq ${entry.seq}: ${error.message}`);
  }
}

// `troupe team show --json --at SEQ`'s object as the live frame's shape: tasks without
// overlaps, mail counts from the pending messages.
function pastView(body) {
  const byName = new Map(body.members.map((m) => [m.name, m.id]));
  const byMember = {};
  for (const message of body.pendingMessages) {
    const id = byName.get(message.targetName) || message.targetName;
    byMember[id] = (byMember[id] || 0) + 1;
  }
  return { teamId: body.teamId, members: body.members, tasks: body.tasks, mail: { pending: body.pendingMessages.length, byMember }, messages: body.messages, at: body.at };
}

function stage(message) {
  if (message.consumed) return "consumed";
  if (message.delivered) return "delivered";
  if (message.received) return "received";
  return "queued";
}

function drawReceipts(messages) {
  const list = document.getElementById("receipts");
  if (!messages.length) {
    list.replaceChildren(el("li", { class: "none", text: "no messages" }));
    return;
  }
  list.replaceChildren(
    ...messages.map((m) => {
      const life = [`queued seq ${m.queued.seq}`];
      life.push(m.received ? `received seq ${m.received.seq}` : "not received");
      life.push(m.delivered ? `delivered seq ${m.delivered.seq}` : "not delivered");
      life.push(m.consumed ? `consumed in turn ${m.consumed.turn ?? "?"} (seq ${m.consumed.seq})` : "not consumed");
      return el("li", { class: "receipt", "data-message": m.id, "data-stage": stage(m) },
        el("span", { class: "who", text: `${m.senderName} → ${m.targetName} · ${m.delivery} · ` }),
        el("span", { class: "life", text: life.join(" · ") }));
    }),
  );
}

function drawTeam() {
  const view = travel.past !== null && travel.pastView ? travel.pastView : state.view;
  if (!view) return;
  // Which Lead event the roster and board show: empty when live (for readers and tests).
  document.getElementById("team").dataset.atSeq = view.at && view.at.seq !== undefined ? String(view.at.seq) : "";
  drawReceipts(travel.past !== null && travel.pastView ? travel.pastView.messages : travel.liveMessages);
  const failure = document.getElementById("failure");
  failure.textContent = view.failure ? `This Team's log cannot be folded past this point; showing the last valid state.\n${view.failure}` : "";
  failure.hidden = !view.failure;

  const mail = view.mail && view.mail.pending ? `· ${view.mail.pending} message${view.mail.pending === 1 ? "" : "s"} pending` : "";
  document.getElementById("mail").textContent = mail;
  const selected = route().member || state.lead;
  document.getElementById("members").replaceChildren(
    ...view.members.map((m) => {
      const pending = (view.mail && view.mail.byMember && view.mail.byMember[m.id]) || 0;
      const button = el(
        "button",
        { class: "member", type: "button", "data-member": m.name, "aria-current": m.id === selected ? "true" : "false", onclick: () => go(state.lead, m.id, state.follow && m.id === state.lead) },
        el("span", { class: "line" },
          el("span", { class: "name", text: m.name }),
          el("span", { class: "badge", "data-status": m.status, text: m.status }),
          m.role === "teammate" && m.phase !== "active" ? el("span", { class: "pill", text: m.phase }) : null,
          pending ? el("span", { class: "pill", text: `${pending} mail` }) : null),
        m.description ? el("span", { class: "desc", text: m.description }) : null,
        m.model ? el("span", { class: "meta model", title: m.model }, breakable(m.model)) : null,
        m.host ? el("span", { class: "meta host", "data-host": m.host, text: `host: ${m.host}` }) : null,
        ...(m.diagnostics || []).map((d) => el("span", { class: "meta", text: `! ${d}` })),
        m.worktree ? el("span", { class: "meta worktree", title: m.worktree.path, text: `worktree: ${m.worktree.branch}` }) : null,
      );
      return el("li", {}, button);
    }),
  );

  drawLedger(view.ledger);

  // The write radar: files two members changed while the same task was in progress
  // (advisory, like write scopes): a banner over the board, and a line on each task.
  const conflicts = view.writeConflicts || [];
  const banner = document.getElementById("conflicts");
  banner.replaceChildren(
    ...(conflicts.length ? [el("strong", { text: `${OVERLAP_MARK} Write conflicts: files two members changed while the same task was in progress` })] : []),
    ...conflicts.map((c) => el("span", { class: "conflict", "data-conflict": c.path, text: `${c.path} changed by ${c.members.join(", ")} (during ${c.tasks.join(", ")})` })),
  );
  banner.hidden = !conflicts.length;

  const open = new Set([...document.querySelectorAll(".task details[open]")].map((d) => d.dataset.task));
  document.getElementById("columns").replaceChildren(
    ...COLUMNS.map((column) => {
      const tasks = view.tasks.filter((t) => column.statuses.includes(t.status));
      return el("div", { class: "column" },
        el("h3", { text: `${column.title} (${tasks.length})` }),
        tasks.length ? el("ul", { class: "tasks" }, ...tasks.map((t) => drawTask(t, open, conflicts))) : el("p", { class: "none", text: "none" }));
    }),
  );
}

// The ledger: model calls, tokens (in: prompt, cached: of the prompt, out: completion) and
// cost per member and for the Team (built-in prices).
function drawLedger(ledger) {
  const table = document.getElementById("ledger");
  const note = document.getElementById("ledger-note");
  if (!ledger) { table.replaceChildren(); note.textContent = ""; return; }
  const cost = (c) => (c === null || c === undefined ? "-" : `$${c.toFixed(4)}`);
  const row = (cells, head) => el("tr", {}, ...cells.map((c) => el(head ? "th" : "td", { text: String(c) })));
  const line = (name, u) => row([name, u.modelCalls, u.promptTokens, u.cachedTokens, u.completionTokens, u.tokens, cost(u.costUsd)]);
  table.replaceChildren(
    row(["member", "calls", "in", "cached", "out", "tokens", "cost"], true),
    ...ledger.members.map((m) => line(m.name, m)),
    line("team", ledger),
  );
  const unpriced = ledger.unpricedModels.length ? ` No price for: ${ledger.unpricedModels.join(", ")}.` : "";
  note.textContent = `Built-in prices as of ${ledger.pricesAsOf}.${unpriced}`;
}

function drawTask(task, open, conflicts) {
  const mine = (conflicts || []).filter((c) => c.tasks.includes(task.id));
  const s = taskState(task);
  const meta = [s.label, task.ownerName ? `owner ${task.ownerName}` : "unowned", `rev ${task.revision}`];
  if (task.blockedBy.length) meta.push(`blocked by ${task.blockedBy.join(", ")}`);
  if (task.writeScopes.length) meta.push(`scopes ${task.writeScopes.join(", ")}`);
  const details = el("details", { "data-task": task.id, open: open.has(task.id) },
    el("summary", { text: "description" }), el("p", { text: task.description }));
  return el("li", { class: "task", "data-task-id": task.id, "data-status": task.status, "data-state": s.key, "data-stalled": task.stalled ? task.stalled.reason : null, "data-conflicted": mine.length ? "true" : "false" },
    el("span", { class: "line" },
      el("span", { class: "icon", title: s.label, "aria-label": s.label, text: s.icon }),
      el("span", { class: "id", text: task.id }),
      el("span", { class: "subject", text: task.subject })),
    el("span", { class: "meta", text: meta.join(" · ") }),
    // Every overlap on each task it concerns (the one in progress and the pending one).
    task.stalled ? el("span", { class: "warn stall", "data-stall": task.stalled.reason, text: stallText(task) }) : null,
    ...(task.overlaps || []).map((o) => el("span", { class: "warn", "data-overlap": o.taskId, text: `${OVERLAP_MARK} write scopes overlap with ${o.taskId} (${o.status === "in_progress" ? "in progress" : o.status})` })),
    ...mine.map((c) => el("span", { class: "warn", "data-conflict": c.path, text: `${OVERLAP_MARK} ${c.path} changed by ${c.members.join(", ")}` })),
    task.description ? details : null);
}

// ---- approvals: requests to run a command outside the sandbox ----
// Polled every second while a Team is open. Answering is the panel's one write: a POST with
// the token of the URL troupe web printed, in an Authorization header.

async function loadApprovals() {
  const lead = state.lead;
  if (!lead) return;
  let body;
  try {
    body = await getJson(`/api/sessions/${encodeURIComponent(lead)}/approvals`);
  } catch (error) {
    return; // The Team's own view says what is wrong with the session.
  }
  if (lead !== state.lead) return;
  drawApprovals(body.approvals || []);
}

function drawApprovals(waiting) {
  const section = document.getElementById("approvals");
  section.hidden = waiting.length === 0 && document.getElementById("approval-note").hidden;
  const shown = new Set([...document.querySelectorAll("[data-approval]")].map((n) => n.dataset.approval));
  const wanted = new Set(waiting.map((a) => a.id));
  if (shown.size === wanted.size && [...wanted].every((id) => shown.has(id))) return;
  document.getElementById("approval-list").replaceChildren(
    ...waiting.map((a) => el("li", { class: "approval", "data-approval": a.id, "data-session": a.session },
      el("span", { class: "who", text: `${a.member} asks (request ${a.id}, ${ago(a.requestedAt)})` }),
      el("code", { text: `$ ${a.command}` }),
      el("span", { class: "because", text: `because: ${a.justification}` }),
      el("span", { class: "actions" },
        el("button", { type: "button", "data-decision": "approve", text: "Approve", onclick: () => answer(a, "approve") }),
        el("button", { type: "button", "data-decision": "deny", text: "Deny", onclick: () => answer(a, "deny") })))),
  );
}

function approvalNote(text) {
  const note = document.getElementById("approval-note");
  note.textContent = text;
  note.hidden = !text;
  if (text) document.getElementById("approvals").hidden = false;
}

async function answer(request, decision) {
  if (!token) {
    approvalNote("This page was opened without its token: open the URL troupe web printed (it ends with ?token=…) to answer.");
    return;
  }
  for (const button of document.querySelectorAll(`[data-approval="${request.id}"] button`)) button.disabled = true;
  const response = await fetch(`/api/sessions/${encodeURIComponent(request.session)}/approvals/${encodeURIComponent(request.id)}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify({ decision }),
  });
  const body = await response.json().catch(() => null);
  if (response.ok) {
    approvalNote(`${decision === "approve" ? "Approved" : "Denied"}: ${request.member}'s request ${request.id}.`);
  } else {
    const message = body && body.error ? `${body.error.message} (${body.error.code})` : `HTTP ${response.status}`;
    approvalNote(`Not answered: ${message}`);
  }
  await loadApprovals();
}

// ---- a member's conversation ----

function memberName(id) {
  const m = state.view && state.view.members.find((x) => x.id === id);
  return m ? m.name : id;
}

function openConversation(id) {
  if (state.convSource && state.member === id) return;
  if (state.convSource) state.convSource.close();
  state.member = id;
  document.getElementById("conversation-title").textContent = `Conversation · ${id === state.lead ? "lead" : memberName(id)}`;
  const list = document.getElementById("items");
  list.replaceChildren();
  if (state.view) drawTeam();
  const source = new EventSource(api(`/api/sessions/${encodeURIComponent(id)}/conversation/events`));
  state.convSource = source;
  const add = (node) => {
    const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    list.append(node);
    if (atBottom) list.scrollTop = list.scrollHeight;
  };
  source.addEventListener("item", (event) => {
    const node = drawItem(JSON.parse(event.data));
    if (node) add(node);
  });
  source.addEventListener("failure", (event) => {
    const body = JSON.parse(event.data);
    add(el("li", { class: "item", "data-error": "true", text: `The log cannot be read further: ${body.message}` }));
  });
  source.addEventListener("error", () => {
    if (source === state.convSource && source.readyState === EventSource.CLOSED) {
      list.append(el("li", { class: "item", "data-error": "true", text: "This conversation cannot be shown (see the roster)." }));
    }
  });
}

function drawItem(item) {
  const when = new Date(item.time).toLocaleTimeString();
  switch (item.kind) {
    case "turnStart":
      return el("li", { class: "item turn", text: `turn ${item.turn} · ${when}` });
    case "turnEnd":
      return el("li", { class: "item turn", text: `turn ${item.turn} ${item.outcome}${item.detail ? `: ${item.detail}` : ""}` });
    case "user":
      return el("li", { class: "item", "data-kind": "user" },
        el("div", { class: "who", text: item.from ? `message from ${item.from} · ${when}` : `${item.source} · ${when}` }),
        el("p", { class: "text", text: item.text }));
    case "assistant":
      return el("li", { class: "item", "data-kind": "assistant" },
        el("div", { class: "who", text: `answer · ${when}` }),
        item.reasoning ? el("details", {}, el("summary", { text: "reasoning" }), el("p", { class: "text", text: item.reasoning })) : null,
        el("p", { class: "text", text: item.text }));
    case "toolCall":
      return el("li", { class: "item", "data-kind": "toolCall" },
        el("div", { class: "who", text: `tool call ${item.name} · ${when}` }),
        el("pre", { text: JSON.stringify(item.arguments, null, 1) }));
    case "toolResult": {
      const body = el("pre", { text: item.content + (item.truncated ? "\n… (cut)" : "") });
      return el("li", { class: "item", "data-kind": "toolResult", "data-error": item.isError ? "true" : "false" },
        el("details", { open: item.isError },
          el("summary", { class: "who", text: `${item.name} ${item.isError ? `error ${item.code || ""}` : "result"}` }), body));
    }
    case "notice":
      return el("li", { class: "item", "data-error": "true", text: item.text });
    default:
      return null;
  }
}

// ---- start ----

document.getElementById("session-select").addEventListener("change", (event) => go(event.target.value, null));
document.getElementById("timeline-slider").addEventListener("input", (event) => moveTimeline(event.target.value));
document.getElementById("timeline-live").addEventListener("click", () => moveTimeline(travel.timeline.length));
window.addEventListener("hashchange", () => {
  // A hash the panel did not set itself is the user's choice: stop following newer Teams.
  if (location.hash !== state.autoHash) state.follow = false;
  apply();
});

(async function start() {
  await loadSessions();
  apply();
  // New sessions appear without a reload; a panel that chose its Team itself moves on to a
  // Team started later (so `troupe web` first, then `troupe demo`, shows the demo).
  setInterval(async () => {
    const hadNone = !state.lead;
    if (!(await loadSessions())) return;
    const newest = newestRoot();
    const shown = state.sessions.find((s) => s.id === state.lead);
    if (hadNone) apply();
    else if (state.follow && newest && newest.id !== state.lead && (!shown || newest.createdAt > shown.createdAt)) {
      go(newest.id, null, true);
    }
  }, 2000);
  loadApprovals();
  setInterval(loadApprovals, 1000);
})();
