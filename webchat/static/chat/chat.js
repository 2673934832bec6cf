// LangBot Host debug chat. Plain JS, no build step. Talks to /ws/v1/chat/ (docs/architecture.md, "Live delivery") and
// reads transcripts over REST. Resume: the last `id` of a run.event is the cursor; after a reconnect the page
// subscribes again with `after_id` and the server replays exactly what was missed.
(function () {
  "use strict";

  const config = JSON.parse(document.getElementById("chat-config").textContent);
  const $ = (id) => document.getElementById(id);
  const els = {
    target: $("target"), conn: $("conn"), messages: $("messages"), empty: $("empty"), input: $("composer-input"),
    composer: $("composer"), send: $("send"), conversations: $("conversations"), newChat: $("new-chat"),
    title: $("chat-title"), subtitle: $("chat-subtitle"), runInfo: $("run-info"), cancel: $("cancel"),
    state: $("state"), actions: $("actions"), artifacts: $("artifacts"), attach: $("attach"),
    attachments: $("attachments"), loadEarlier: $("load-earlier"), scrim: $("scrim"),
    targetDetail: $("target-detail"), newest: $("jump-newest"),
    takeover: $("takeover"), release: $("release"), holdState: $("hold-state"), asOperator: $("as-operator"),
    asOperatorLabel: $("as-operator-label"),
    linkAccounts: $("link-accounts"), linkDialog: $("link-dialog"), linkCode: $("link-code"),
  };
  const ACTIVE = new Set(["queued", "running"]);
  const PING_SECONDS = 20;
  // The page's words in the active language: Django's JavaScript catalogue (/jsi18n/, from
  // locale/*/LC_MESSAGES/djangojs.po) defines gettext and interpolate; without it the English stands.
  const _ = window.gettext || ((text) => text);
  const fmt = (template, values) => template.replace(/%\((\w+)\)s/g, (whole, key) => String(values[key]));
  // A run's or tool call's status as shown; the class keeps the status itself.
  const STATUS_LABELS = {
    queued: _("queued"), running: _("running"), completed: _("completed"), failed: _("failed"),
    cancelled: _("cancelled"), timeout: _("timeout"), done: _("done"), error: _("error"),
  };
  const statusLabel = (status) => STATUS_LABELS[status] || status;
  const RUN_INFO_LABELS = {
    run: _("run"), status: _("status"), error: _("error"), reason: _("reason"), binding: _("binding"), runner: _("runner"),
  };

  let ws = null;
  let retry = 0;
  let retryTimer = null;
  let watchdog = null;
  let conversationId = null;
  let lastId = null;          // cursor: the largest run.event id received for this conversation
  let needTranscript = false; // the transcript is loaded once per opened conversation, not on resume
  let nextBefore = null;
  let runs = new Map();       // run_id -> {el, bubble, text, tools, status, files}
  let currentRun = null;
  let uploads = [];           // {id, file, status: uploading|ready|error, artifact, chip, xhr}
  let pendingUser = null;     // the user bubble just sent, until the server names its event
  let resumed = false;        // the next `subscribed` follows a reconnect (not a fresh open)
  let stick = true;           // keep the newest text in view; false once the user scrolled up
  let targetsReadAt = 0;
  let stateItems = new Map(); // "<binding>|<scope>:<key>" -> its panel entry: one per state key, newest value

  // --- helpers -----------------------------------------------------------------------------------------

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const child of children) if (child !== null && child !== undefined) el.append(child);
    return el;
  }
  const pretty = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));
  const wsParam = () => "workspace=" + encodeURIComponent(config.workspace);
  function csrf() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  function contentText(content) {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) return content.filter((c) => c && c.type === "text").map((c) => c.text || "").join("");
    return "";
  }
  function contentFiles(content) {
    if (!Array.isArray(content)) return [];
    return content.filter((c) => c && c.type !== "text");
  }
  function scrollDown(force) {
    // Growing text fires no scroll event, so `stick` holds until the user scrolls away from the bottom.
    if (force) stick = true;
    if (stick) els.messages.scrollTop = els.messages.scrollHeight;
    else els.newest.hidden = false; // newer text below where the user is reading
  }
  const shortId = (id) => String(id || "").slice(0, 8);
  const runnerName = (id) => String(id || "").replace(/^plugin:/, "");
  function timeLabel(when) {
    const d = when ? new Date(when) : new Date();
    const sameDay = d.toDateString() === new Date().toDateString();
    const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    return sameDay ? time : `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
  }
  function titleOf(text) {
    const words = String(text || "").trim().split(/\s+/).filter(Boolean);
    if (!words.length) return _("(no text)");
    const head = words.slice(0, 6).join(" ");
    return head.length > 48 ? head.slice(0, 47) + "…" : head + (words.length > 6 ? "…" : "");
  }

  // --- connection ----------------------------------------------------------------------------------------

  function setConn(kind, text) {
    els.conn.className = "pill " + (kind === "ok" ? "pill-ok" : kind === "bad" ? "pill-bad" : "pill-wait");
    els.conn.textContent = text;
    els.conn.dataset.state = kind;
  }

  function connect() {
    clearTimeout(retryTimer);
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    ws = new WebSocket(proto + location.host + config.ws_path + "?" + wsParam());
    ws.onopen = () => {
      retry = 0;
      setConn("ok", _("connected"));
      if (conversationId) { resumed = lastId !== null && !needTranscript; subscribe(); }
      armWatchdog();
    };
    ws.onmessage = (event) => {
      armWatchdog();
      let message;
      try { message = JSON.parse(event.data); } catch (e) { return; }
      onServerMessage(message);
    };
    ws.onclose = (event) => {
      clearTimeout(watchdog);
      ws = null;
      if (event.code === 4401) {
        setConn("bad", _("signed out"));
        location.href = "/chat/login/?next=/chat/";
        return;
      }
      if (event.code === 4403) { setConn("bad", _("no workspace")); return; }
      setConn("wait", _("reconnecting…"));
      const delay = Math.min(10000, 500 * 2 ** retry++) + Math.random() * 250;
      retryTimer = setTimeout(connect, delay);
    };
  }

  function armWatchdog() {
    // The server pings every PING_SECONDS; silence for much longer means the connection is dead.
    clearTimeout(watchdog);
    watchdog = setTimeout(() => { if (ws) ws.close(); }, PING_SECONDS * 2500);
  }

  function send(message) {
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(JSON.stringify(message));
    return true;
  }

  function subscribe() {
    const message = { type: "subscribe", conversation_id: conversationId };
    if (lastId !== null) message.after_id = lastId;
    send(message);
  }

  // --- server → page -------------------------------------------------------------------------------------

  function onServerMessage(message) {
    switch (message.type) {
      case "run.event": onRunEvent(message); break;
      case "run.status": onRunStatus(message); break;
      case "subscribed":
        if (lastId === null || message.last_id > lastId) lastId = message.last_id;
        if (needTranscript) { needTranscript = false; loadTranscript(false); }
        else if (resumed) syncTranscript();
        resumed = false;
        break;
      case "error": onError(message); break;
      case "transcript.item": onTranscriptItem(message); break;
      case "conversation.hold": showHold(message.hold); break;
      default: break; // ping and future additions
    }
  }

  function onError(message) {
    if (message.details && message.details.event_id) tagPendingUser(message.details.event_id);
    if (message.code === "not_found" && needTranscript) {
      // A conversation id from the address bar that this workspace does not have.
      needTranscript = false;
    }
    systemLine(message.message || message.code);
  }

  function runView(runId) {
    let view = runs.get(runId);
    if (view) return view;
    els.empty.hidden = true;
    const bubble = h("div", { class: "bubble" });
    const tools = h("div", { class: "tools" });
    const files = h("div", { class: "files" });
    const status = h("span", { class: "status queued", text: statusLabel("queued") });
    const thinking = h("div", { class: "thinking", role: "status", "aria-label": _("thinking") },
      h("span", { class: "dot" }), h("span", { class: "dot" }), h("span", { class: "dot" }),
      h("span", { class: "thinking-text", text: _("thinking…") }));
    // On a phone the side panel is a drawer: the reply itself offers Cancel while its run is active.
    const cancel = h("button", { type: "button", class: "btn ghost small cancel-run", text: _("Cancel"),
      onclick: () => send({ type: "cancel", run_id: runId }) });
    const when = h("span", { class: "when", text: timeLabel(null) });
    const meta = h("div", { class: "meta" }, when, status, h("span", { class: "mono run-id", title: runId, text: shortId(runId) }), cancel);
    const el = h("div", { class: "msg assistant streaming", "data-run-id": runId }, tools, thinking, bubble, files, meta);
    bubble.hidden = true;
    els.messages.append(el);
    view = { el, bubble, tools, files, status, thinking, cancel, text: "", toolCards: new Map(), state: "queued", error: null };
    runs.set(runId, view);
    return view;
  }

  function renderActivity(view) {
    const active = ACTIVE.has(view.state);
    // A run whose runner does not stream (`streaming: false` on its run.status) shows "thinking…" until its
    // whole reply comes (it takes no deltas: applyRunEvent), rather than a bubble waiting for pieces.
    view.thinking.hidden = !(active && !view.text);
    view.el.classList.toggle("whole", Boolean(view.whole));
    view.cancel.hidden = !active;
    view.bubble.hidden = !view.text;
  }

  function onRunEvent(message) {
    if (lastId === null || message.id > lastId) lastId = message.id;
    applyRunEvent(message.run_id, message.event);
    scrollDown(false);
  }

  // One result of a run, live (WebSocket) or read back (REST, when a conversation is reopened): both
  // build the same picture.
  function applyRunEvent(runId, event) {
    const view = runView(runId);
    const { type, data } = event;
    if (type === "message.delta") {
      if (view.whole) return;
      view.text += contentText(data.chunk && data.chunk.content);
      view.bubble.textContent = view.text;
    } else if (type === "message.completed") {
      const content = data.message && data.message.content;
      view.text = contentText(content);
      view.bubble.textContent = view.text;
      view.el.classList.remove("streaming");
      view.el.classList.add("done");
      for (const file of contentFiles(content)) view.files.append(fileLink(file));
    } else if (type === "tool.call.started" || type === "tool.call.completed") {
      toolCard(view, type, data);
    } else if (type === "artifact.created") {
      const link = fileLink(data);
      view.files.append(link);
      addPanelItem(els.artifacts, h("li", {}, fileLink(data)));
    } else if (type === "state.updated") {
      stateItem(runId, view, data);
    } else if (type === "action.requested") {
      addPanelItem(els.actions, h("li", {}, h("span", { class: "k", text: data.action }),
        h("pre", { text: pretty({ target: data.target, payload: data.payload }) })));
    } else if (type === "run.completed") {
      view.el.classList.remove("streaming");
      showCitations(view, data.metadata && data.metadata.citations);
      setRunState(runId, "completed");
    } else if (type === "run.failed") {
      view.el.classList.remove("streaming");
      showRunError(view, data);
      setRunState(runId, data.code === "cancelled" ? "cancelled" : "failed");
    }
    renderActivity(view);
  }

  // The sources a reply drew on (`run.completed.metadata.citations`), under it: each runner names them its own
  // way (the local agent and Dify `document_name`, DashScope `doc_name` or `title`), with a score and an excerpt.
  function showCitations(view, citations) {
    if (!Array.isArray(citations) || !citations.length || view.el.querySelector(".citations")) return;
    const items = citations.filter((c) => c && typeof c === "object").map((c) => {
      const title = c.document_name || c.doc_name || c.title || c.dataset_name || c.document_id || c.kb_id || "?";
      const score = typeof (c.rerank_score ?? c.score) === "number" ? ` (${(c.rerank_score ?? c.score).toFixed(2)})` : "";
      const excerpt = c.excerpt || c.content || "";
      return h("li", { title: excerpt }, h("span", { class: "citation-title", text: title + score }),
        excerpt ? h("div", { class: "muted tiny citation-excerpt", text: excerpt.length > 160 ? excerpt.slice(0, 159) + "…" : excerpt }) : null);
    });
    const box = h("details", { class: "citations" }, h("summary", { text: fmt(_("Sources (%(count)s)"), { count: items.length }) }), h("ol", {}, ...items));
    view.el.insertBefore(box, view.el.querySelector(".meta"));
  }

  function showRunError(view, error) {
    if (view.error) return;
    view.error = error;
    view.el.classList.add("failed");
    view.el.insertBefore(h("div", { class: "error-line", role: "alert", text: `${error.code}: ${error.message || ""}` }), view.el.querySelector(".meta"));
  }

  // The state panel keeps one entry per binding, scope and key (its newest value), labelled with who
  // wrote it: two runners keeping the same key (`external.*` of two external runners) stay told apart.
  function stateItem(runId, view, data) {
    const binding = view.binding || "";
    const id = `${binding}|${data.scope}:${data.key}`;
    const item = h("li", { "data-state-key": `${data.scope}:${data.key}` },
      h("span", { class: "k", text: `${data.scope}:${data.key}` }),
      h("div", { class: "muted tiny state-by", text: (binding ? fmt(_("by %(binding)s · "), { binding }) : "") + fmt(_("run %(run)s"), { run: shortId(runId) }) }),
      h("pre", { text: pretty(data.value) }));
    const old = stateItems.get(id);
    if (old) old.remove();
    stateItems.set(id, item);
    addPanelItem(els.state, item);
  }

  function toolCard(view, type, data) {
    let card = view.toolCards.get(data.tool_call_id);
    if (!card) {
      const state = h("span", { class: "status running tool-state", text: statusLabel("running") });
      const body = h("div", {});
      const el = h("details", { class: "tool-card", "data-tool-call-id": data.tool_call_id },
        h("summary", {}, h("span", { class: "tool-name", text: data.tool_name }), state),
        body);
      view.tools.append(el);
      card = { el, state, body };
      view.toolCards.set(data.tool_call_id, card);
    }
    if (type === "tool.call.started") {
      card.body.append(h("span", { class: "tool-label", text: _("parameters") }), h("pre", { text: pretty(data.parameters || {}) }));
    } else {
      const failed = !!data.error;
      card.state.className = "status tool-state " + (failed ? "failed" : "completed");
      card.state.textContent = statusLabel(failed ? "error" : "done");
      card.body.append(h("span", { class: "tool-label", text: failed ? _("error") : _("result") }),
        h("pre", { text: pretty(failed ? data.error : data.result) }));
    }
  }

  function fileSize(bytes) {
    if (typeof bytes !== "number") return "";
    if (bytes < 1024) return `${bytes} B`;
    if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
    return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
  }

  // An artifact ref ({artifact_id, name, mime_type, size}) or a content part with a URL: an image preview
  // for image/*, otherwise a link to the content (GET /api/v1/artifacts/{id}/content).
  function fileLink(item) {
    const id = item.artifact_id;
    const name = item.name || item.file_name || id || "file";
    const mime = item.mime_type || "";
    const href = id ? `${config.api}/artifacts/${encodeURIComponent(id)}/content?${wsParam()}` : (item.file_url || item.image_url);
    const attrs = { href, target: "_blank", rel: "noopener", title: name, "data-artifact-id": id };
    if (!href) return h("span", { class: "file", text: name });
    if (mime.startsWith("image/") || item.type === "image_url") {
      return h("a", { ...attrs, class: "file image" }, h("img", { src: href, alt: name, loading: "lazy" }));
    }
    return h("a", { ...attrs, class: "file" }, h("span", { class: "file-icon", "aria-hidden": "true", text: "⬇" }),
      h("span", { class: "file-name", text: name }), item.size !== undefined ? h("span", { class: "muted", text: fileSize(item.size) }) : null);
  }

  function addPanelItem(list, item) {
    if (list.firstElementChild && list.firstElementChild.classList.contains("muted")) list.innerHTML = "";
    list.prepend(item);
  }

  function onRunStatus(message) {
    if (message.conversation_id && !conversationId) {
      // The reply to our first message of a new conversation names it.
      addConversation(message.conversation_id, els.input.dataset.lastText || "", null);
      setConversation(message.conversation_id, false);
    }
    if (message.event_id) tagPendingUser(message.event_id);
    runView(message.run_id);
    setRunState(message.run_id, message.status, message);
  }

  function tagPendingUser(eventId) {
    // Lets a later edit or reaction that names this message (by transcript id) find it: see resolveIds.
    if (pendingUser && !pendingUser.dataset.eventId) pendingUser.dataset.eventId = eventId;
    pendingUser = null;
  }

  function setRunState(runId, status, message) {
    const view = runView(runId);
    view.state = status;
    view.status.className = "status " + status;
    view.status.textContent = statusLabel(status);
    if (!ACTIVE.has(status)) view.el.classList.remove("streaming");
    if (message && message.streaming === false) view.whole = true;
    if (message && message.runner_id) view.runner = message.runner_id;
    if (message && message.binding_id) view.binding = message.binding_id;
    if (message && message.status_reason) view.reason = message.status_reason;
    if (!currentRun || currentRun === runId || ACTIVE.has(status)) currentRun = runId;
    renderActivity(view);
    renderRunInfo();
    if (message && message.binding_id && message.runner_id) checkTargetLabel(message.binding_id, message.runner_id);
  }

  function renderRunInfo() {
    const view = currentRun && runs.get(currentRun);
    if (!view) {
      els.runInfo.textContent = _("No run yet.");
      els.cancel.hidden = true;
      return;
    }
    const rows = [["run", currentRun], ["status", view.state]];
    if (view.error) rows.push(["error", `${view.error.code}: ${view.error.message || ""}`]);
    if (view.reason) rows.push(["reason", view.reason]);
    if (view.binding) rows.push(["binding", view.binding]);
    if (view.runner) rows.push(["runner", view.runner]);
    const dl = h("dl", {});
    for (const [k, v] of rows) {
      const dd = h("dd", { class: k === "status" ? "" : "mono", text: k === "status" ? "" : v });
      if (k === "status") dd.append(h("span", { class: "status " + v, text: statusLabel(v) }));
      dl.append(h("dt", { text: RUN_INFO_LABELS[k] || k }), dd);
    }
    els.runInfo.replaceChildren(dl);
    els.runInfo.classList.remove("muted");
    els.cancel.hidden = !ACTIVE.has(view.state);
  }

  function systemLine(text) {
    els.empty.hidden = true;
    els.messages.append(h("div", { class: "msg system" }, h("div", { class: "bubble", text })));
    scrollDown(true);
  }

  // --- transcript ----------------------------------------------------------------------------------------

  // A transcript item from the REST API (`id`) or from a `transcript.item` message (`message_id`).
  function transcriptItem(item) {
    const role = ["user", "assistant", "tool", "system"].includes(item.role) ? item.role : "system";
    const files = h("div", { class: "files" });
    for (const a of item.artifacts || []) files.append(fileLink(a));
    for (const c of contentFiles(item.contents)) files.append(fileLink(c));
    const when = item.created_at ? new Date(item.created_at) : new Date();
    const meta = h("div", { class: "meta" }, h("span", { text: when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) }));
    if (role === "assistant" && item.actor && item.actor.actor_type === "operator") {
      // A person's reply while they held the conversation (human takeover).
      meta.append(h("span", { class: "via", text: fmt(_("sent by %(runner)s"), { runner: item.actor.actor_id || _("operator") }) }));
    } else if (role === "assistant" && !item.run_id && item.runner_id) {
      // An extra message a runner sent (platform action `message.send`), not a run's reply.
      meta.append(h("span", { class: "via", text: fmt(_("sent by %(runner)s"), { runner: item.runner_id.replace(/^plugin:/, "") }) }));
    }
    const attrs = { class: `msg ${role} done`, "data-transcript-id": String(item.id ?? item.message_id) };
    if (item.run_id) attrs["data-run-id"] = item.run_id;
    if (role === "user" && item.event_id) attrs["data-event-id"] = item.event_id;
    const bubble = h("div", { class: "bubble", text: item.content || contentText(item.contents) });
    if (!bubble.textContent) bubble.hidden = true;
    return h("div", attrs, bubble, files, meta);
  }

  function itemElement(id) {
    return els.messages.querySelector(`.msg[data-transcript-id="${CSS.escape(String(id))}"]`);
  }

  async function transcriptPage(before) {
    let url = `${config.api}/conversations/${encodeURIComponent(conversationId)}/transcript?${wsParam()}&limit=100`;
    if (before) url += `&before=${before}`;
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    return response.ok ? response.json() : null;
  }

  // Bubbles that streamed in (a run's reply) or were typed here (the user's message) do not know their
  // transcript id; the newest transcript page names them by run id and event id.
  function resolveIds(items) {
    for (const item of items) {
      if (itemElement(item.id)) continue;
      let el = null;
      if (item.role === "assistant" && item.run_id) el = els.messages.querySelector(`.msg.assistant[data-run-id="${CSS.escape(item.run_id)}"]`);
      if (item.role === "user" && item.event_id) el = els.messages.querySelector(`.msg.user[data-event-id="${CSS.escape(item.event_id)}"]`);
      if (el && !el.dataset.transcriptId) el.dataset.transcriptId = String(item.id);
    }
  }

  async function findItem(id) {
    let el = itemElement(id);
    if (el || !conversationId) return el;
    const page = await transcriptPage(null);
    if (page) resolveIds(page.items);
    return itemElement(id);
  }

  function setItemText(el, text) {
    const view = el.dataset.runId && runs.get(el.dataset.runId);
    if (view && view.el === el) view.text = text;
    const bubble = el.querySelector(".bubble");
    bubble.textContent = text;
    bubble.hidden = !text;
    const meta = el.querySelector(".meta");
    if (meta && !meta.querySelector(".edited")) meta.append(h("span", { class: "edited", text: _("edited") }));
  }

  function addReaction(el, reaction) {
    let box = el.querySelector(".reactions");
    if (!box) {
      box = h("div", { class: "reactions" });
      el.insertBefore(box, el.querySelector(".meta"));
    }
    const chip = [...box.children].find((c) => c.dataset.reaction === reaction);
    if (chip) {
      chip.dataset.count = String(Number(chip.dataset.count) + 1);
      chip.textContent = `${reaction} ${chip.dataset.count}`;
    } else {
      box.append(h("span", { class: "reaction", "data-reaction": reaction, "data-count": "1", text: reaction }));
    }
  }

  // A runner's platform action on this conversation (`transcript.item`, not part of the resume cursor).
  async function onTranscriptItem(message) {
    const item = message.item || {};
    const id = item.message_id ?? item.id;
    if (id === undefined || id === null) return;
    if (message.action === "message.send" || !message.action) {
      if (itemElement(id)) return;
      // A user's message in a held conversation: the bubble typed here already shows it.
      if (item.event_id && els.messages.querySelector(`.msg.user[data-event-id="${CSS.escape(item.event_id)}"]`)) return;
      els.empty.hidden = true;
      els.messages.append(transcriptItem({ ...item, id, run_id: null }));
      scrollDown(false);
    } else if (message.action === "message.edit") {
      const el = await findItem(id);
      if (el) setItemText(el, item.content || contentText(item.contents));
    } else if (message.action === "reaction.add" && message.reaction) {
      const el = await findItem(id);
      if (el) { addReaction(el, message.reaction); scrollDown(false); }
    }
  }

  // After a reconnect: run events were replayed from the cursor, transcript changes were not. Edits made
  // meanwhile are applied and extra messages that arrived meanwhile are appended.
  async function syncTranscript() {
    const id = conversationId;
    const page = await transcriptPage(null);
    if (!page || id !== conversationId) return;
    resolveIds(page.items);
    const shown = [...els.messages.querySelectorAll(".msg[data-transcript-id]")].map((el) => Number(el.dataset.transcriptId));
    const newest = shown.length ? Math.max(...shown) : 0;
    for (const item of page.items.slice().reverse()) {
      const el = itemElement(item.id);
      const text = item.content || contentText(item.contents);
      if (el) {
        const bubble = el.querySelector(".bubble");
        if (item.role === "assistant" && bubble && text && bubble.textContent !== text && !el.classList.contains("streaming")) setItemText(el, text);
      } else if (item.id > newest && !(item.run_id && runs.has(item.run_id)) && item.role !== "user") {
        els.messages.append(transcriptItem(item));
      }
    }
  }

  async function loadTranscript(earlier) {
    const id = conversationId;
    const page = await transcriptPage(earlier ? nextBefore : null);
    if (!page || id !== conversationId) return;
    nextBefore = page.next_before;
    els.loadEarlier.hidden = !nextBefore;
    // Items come newest first; they go above everything already shown, oldest at the top.
    const anchor = els.loadEarlier.nextSibling;
    const fragment = document.createDocumentFragment();
    resolveIds(page.items);
    for (const item of page.items.slice().reverse()) {
      // A reply whose run is already on screen (it streamed in) is not shown twice.
      if (item.run_id && runs.has(item.run_id)) continue;
      if (els.messages.querySelector(`[data-transcript-id="${item.id}"]`)) continue;
      fragment.append(transcriptItem(item));
    }
    if (fragment.childNodes.length) els.empty.hidden = true;
    els.messages.insertBefore(fragment, earlier ? anchor : els.empty.nextSibling);
    if (!earlier) {
      await loadRuns(id);
      scrollDown(true);
    }
  }

  // Reopening a conversation: its finished runs are read back (GET /runs, /runs/{id}/events) and drawn
  // as they were live — status, error, tool cards, artifacts, the side panel for the last run — in place
  // of their plain transcript reply. Runs still active are replayed by the WebSocket instead.
  async function loadRuns(id) {
    const base = `${config.api}/runs?${wsParam()}&conversation_id=${encodeURIComponent(id)}&limit=50`;
    const response = await fetch(base, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok || id !== conversationId) return;
    const page = await response.json();
    const finished = page.items.filter((run) => !runs.has(run.run_id)).reverse(); // oldest first
    const events = await Promise.all(finished.map(async (run) => {
      const url = `${config.api}/runs/${encodeURIComponent(run.run_id)}/events?${wsParam()}`;
      const answer = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      return answer.ok ? (await answer.json()).items : [];
    }));
    if (id !== conversationId) return;
    finished.forEach((run, index) => {
      const view = runView(run.run_id);
      const replaced = placeRun(view, run);
      view.binding = run.binding_id;
      view.runner = run.runner_id;
      for (const event of events[index]) applyRunEvent(run.run_id, event);
      if (replaced) keepTranscriptChanges(view, replaced);
      if (!view.text && run.output && run.status === "completed") { view.text = run.output; view.bubble.textContent = run.output; }
      if (["failed", "timeout", "cancelled"].includes(run.status)) {
        showRunError(view, run.error && run.error.code ? run.error : { code: run.status, message: run.status_reason });
      }
      view.el.querySelector(".meta .when").textContent = timeLabel(run.created_at);
      setRunState(run.run_id, run.status, { status_reason: run.status_reason, runner_id: run.runner_id, binding_id: run.binding_id });
      view.el.classList.add("done");
    });
    // The side panel shows the conversation's last run, unless one is still going.
    const newest = finished[finished.length - 1];
    if (newest && !(currentRun && runs.get(currentRun) && ACTIVE.has(runs.get(currentRun).state))) {
      currentRun = newest.run_id;
      renderRunInfo();
    }
  }

  function placeRun(view, run) {
    // Where its plain reply was, else after the message that started it.
    const reply = els.messages.querySelector(`.msg[data-transcript-id][data-run-id="${CSS.escape(run.run_id)}"]`);
    if (reply) {
      view.el.dataset.transcriptId = reply.dataset.transcriptId;
      reply.replaceWith(view.el);
      return reply;
    }
    const asked = els.messages.querySelector(`.msg.user[data-event-id="${CSS.escape(run.event_id)}"]`);
    if (!asked) return null;
    let after = asked;
    while (after.nextElementSibling && after.nextElementSibling.classList.contains("assistant") && after.nextElementSibling.dataset.runId) after = after.nextElementSibling;
    after.after(view.el);
    return null;
  }

  // The transcript holds what happened to the reply after its run (a runner's edit, reactions).
  function keepTranscriptChanges(view, replaced) {
    const bubble = replaced.querySelector(".bubble");
    const text = bubble ? bubble.textContent : "";
    if (text && text !== view.text) { view.text = text; view.bubble.textContent = text; }
    const reactions = replaced.querySelector(".reactions");
    if (reactions) view.el.insertBefore(reactions, view.el.querySelector(".meta"));
    if (replaced.querySelector(".edited")) view.el.querySelector(".meta").append(h("span", { class: "edited", text: _("edited") }));
  }

  // --- conversations ------------------------------------------------------------------------------------

  function setConversation(id, load) {
    conversationId = id;
    const known = id && els.conversations.querySelector(`[data-id="${CSS.escape(id)}"]`);
    els.title.textContent = known ? known.dataset.title : id ? _("Conversation") : _("New conversation");
    els.subtitle.textContent = id || _("Say something to start one.");
    for (const b of els.conversations.querySelectorAll("button")) b.classList.toggle("active", b.dataset.id === id);
    showHold(null);
    if (id) history.replaceState(null, "", "#c=" + encodeURIComponent(id));
    else history.replaceState(null, "", location.pathname);
    if (load) {
      lastId = null;
      needTranscript = true;
      subscribe();
    }
  }

  // --- human takeover -------------------------------------------------------------------------------------
  // Take over holds the open conversation (POST .../takeover): its messages start no run until Release;
  // meanwhile "Reply as operator" sends the composer's text as the operator's reply (POST .../messages).

  function showHold(hold) {
    if (hold && hold.conversation_id !== conversationId) return;
    const held = Boolean(hold && hold.status === "held");
    els.takeover.hidden = !conversationId || held;
    els.release.hidden = !held;
    els.asOperatorLabel.hidden = !held;
    if (!held) els.asOperator.checked = false;
    els.holdState.hidden = !hold || hold.status === "released";
    if (hold && hold.status === "held") els.holdState.textContent = fmt(_("held by %(who)s"), { who: hold.held_by || "" });
    else if (hold && hold.status === "requested") els.holdState.textContent = _("waiting for a human");
  }

  async function holdPost(action, body) {
    const url = `${config.api}/conversations/${encodeURIComponent(conversationId)}/${action}?${wsParam()}`;
    const response = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { Accept: "application/json", "Content-Type": "application/json", "X-CSRFToken": csrf() },
      body: JSON.stringify(body || {}),
    });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) systemLine(answer.message || answer.code || String(response.status));
    return response.ok ? answer : null;
  }

  els.takeover.addEventListener("click", async () => { if (conversationId) showHold(await holdPost("takeover")); });
  els.release.addEventListener("click", async () => { if (conversationId) showHold(await holdPost("release")); });

  async function operatorSend(text) {
    const sent = await holdPost("messages", { text });
    if (sent) onTranscriptItem({ action: "message.send", item: { ...sent, actor: { actor_type: "operator", actor_id: sent.operator } } });
  }

  function openConversation(id) {
    resetView();
    setConversation(id, true);
    document.body.classList.remove("sidebar-open");
    els.scrim.hidden = true;
  }

  function resetView() {
    for (const el of [...els.messages.querySelectorAll(".msg")]) el.remove();
    runs = new Map();
    currentRun = null;
    nextBefore = null;
    els.loadEarlier.hidden = true;
    els.empty.hidden = false;
    stateItems = new Map();
    for (const list of [els.state, els.actions, els.artifacts]) list.replaceChildren(h("li", { class: "muted small", text: _("None.") }));
    renderRunInfo();
  }

  // Titled by its first words and its start time; the id is kept small underneath (and in the tooltip).
  function addConversation(id, first, startedAt) {
    if (els.conversations.querySelector(`[data-id="${CSS.escape(id)}"]`)) return;
    const title = titleOf(first);
    const when = timeLabel(startedAt);
    const button = h("button", { type: "button", "data-id": id, "data-title": `${title} · ${when}`, title: id, onclick: () => openConversation(id) },
      h("span", { class: "conv-preview" }, h("span", { class: "conv-title", text: title }), h("span", { class: "conv-time", text: when })),
      h("span", { class: "conv-id", text: id.replace(/^webui:/, "").slice(0, 12) }));
    if (id === conversationId) {
      button.classList.add("active");
      els.title.textContent = button.dataset.title;
    }
    els.conversations.prepend(h("li", {}, button));
  }

  // --- composer -----------------------------------------------------------------------------------------

  // Who answers a target, as the resolver would choose now: "demo-qa · qa-runner/default".
  function answeredBy(target) {
    if (target.conflict && target.conflict.length) return fmt(_("conflict: %(bindings)s"), { bindings: target.conflict.join(", ") });
    if (!target.replying) return _("no binding answers");
    return `${target.replying.binding_id} · ${runnerName(target.replying.runner_id)}`;
  }

  function fillTargets(targets) {
    const chosen = els.target.value || localStorage.getItem("langbot.chat.target." + config.workspace) || "";
    const options = [h("option", { value: "", "data-detail": answeredBy(targets.default), text: `${_("Workspace default")} → ${answeredBy(targets.default)}` })];
    if (targets.bots.length) {
      const group = h("optgroup", { label: _("Bots") });
      for (const b of targets.bots) group.append(h("option", { value: "bot:" + b.bot_id, "data-detail": answeredBy(b), text: `${b.name} → ${answeredBy(b)}` }));
      options.push(group);
    }
    if (targets.bindings.length) {
      const group = h("optgroup", { label: _("Bindings") });
      for (const b of targets.bindings) {
        const detail = `${runnerName(b.runner_id)}${b.replies ? "" : " " + _("(observer)")}`;
        group.append(h("option", { value: "binding:" + b.binding_id, "data-detail": detail, "data-runner": b.runner_id, text: `${b.name} — ${detail}` }));
      }
      options.push(group);
    }
    els.target.replaceChildren(...options);
    if ([...els.target.options].some((o) => o.value === chosen)) els.target.value = chosen;
    config.bindings = targets.bindings;
    targetsReadAt = Date.now();
    showTarget();
  }

  // The whole choice, never cut short: the select may be narrow (a phone), this line wraps.
  function showTarget() {
    const option = els.target.selectedOptions[0];
    if (!option) return;
    const name = option.value ? option.textContent.split(/ → | — /)[0] : _("Workspace default");
    els.targetDetail.textContent = `${_("Send to:")} ${name} → ${option.dataset.detail || ""}`;
    els.target.title = option.textContent;
  }

  async function refreshTargets(force) {
    if (!force && Date.now() - targetsReadAt < 3000) return;
    targetsReadAt = Date.now();
    try {
      const response = await fetch(`${config.targets_url}?${wsParam()}`, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.ok) fillTargets(await response.json());
    } catch (e) { /* offline: keep what is shown */ }
  }

  function checkTargetLabel(bindingId, runnerId) {
    // A run names the runner it really used: a label that says otherwise is stale.
    const b = (config.bindings || []).find((x) => x.binding_id === bindingId);
    if (b && b.runner_id !== runnerId) refreshTargets(true);
  }

  function submit(event) {
    event.preventDefault();
    if (uploads.some((u) => u.status === "uploading")) return; // Send is disabled until they finish
    const text = els.input.value.trim();
    const ready = uploads.filter((u) => u.status === "ready").map((u) => u.artifact);
    if (!text && !ready.length) return;
    if (els.asOperator.checked && conversationId && text) {
      operatorSend(text);
      els.input.value = "";
      autosize();
      return;
    }
    const message = { type: "message", text };
    if (conversationId) message.conversation_id = conversationId;
    const target = els.target.value;
    if (target.startsWith("bot:")) message.bot_id = target.slice(4);
    if (target.startsWith("binding:")) message.binding_id = target.slice(8);
    if (ready.length) message.attachments = ready.map((a) => ({ artifact_id: a.artifact_id }));
    if (!send(message)) { systemLine(_("Not connected — the message was not sent. Reconnecting…")); return; }
    els.empty.hidden = true;
    const files = h("div", { class: "files" });
    for (const a of ready) files.append(fileLink(a));
    const meta = h("div", { class: "meta" }, h("span", { text: new Date().toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) }));
    pendingUser = h("div", { class: "msg user" }, text ? h("div", { class: "bubble", text }) : null, files, meta);
    els.messages.append(pendingUser);
    els.input.dataset.lastText = text || ready.map((a) => a.name).join(", ");
    els.input.value = "";
    autosize();
    for (const u of uploads) if (u.preview) URL.revokeObjectURL(u.preview);
    uploads = [];
    renderUploads();
    scrollDown(true);
  }

  // --- attachments ----------------------------------------------------------------------------------------
  // Each chosen file is uploaded at once (POST /api/v1/artifacts, multipart field `file`, session + CSRF);
  // the message names the stored artifacts by id. XHR rather than fetch: only XHR reports upload progress.

  let uploadSeq = 0;

  function uploadError(xhr) {
    try {
      const body = JSON.parse(xhr.responseText);
      if (body && body.error && body.error.message) return body.error.message;
      if (body && body.detail) return String(body.detail);
    } catch (e) { /* not JSON: a proxy's page, say */ }
    if (xhr.status === 413) return _("The file is too large.");
    return xhr.status ? fmt(_("Upload failed (HTTP %(status)s)."), { status: xhr.status }) : _("Upload failed: no connection.");
  }

  function upload(fileList) {
    for (const file of fileList) {
      const entry = { id: ++uploadSeq, file, status: "uploading", progress: 0, artifact: null, error: "" };
      if (file.type.startsWith("image/")) entry.preview = URL.createObjectURL(file);
      const body = new FormData();
      body.append("file", file, file.name);
      const xhr = new XMLHttpRequest();
      entry.xhr = xhr;
      xhr.open("POST", `${config.api}/artifacts?${wsParam()}`);
      xhr.setRequestHeader("X-CSRFToken", csrf());
      xhr.setRequestHeader("Accept", "application/json");
      xhr.upload.onprogress = (e) => {
        if (e.lengthComputable) { entry.progress = e.loaded / e.total; updateChip(entry); }
      };
      xhr.onload = () => {
        if (xhr.status === 201 || xhr.status === 200) {
          try {
            const a = JSON.parse(xhr.responseText);
            entry.artifact = { artifact_id: a.artifact_id, name: a.name || file.name, mime_type: a.mime_type || file.type, size: a.size };
            entry.status = "ready";
          } catch (e) {
            entry.status = "error";
            entry.error = _("The server's answer was not understood.");
          }
        } else {
          entry.status = "error";
          entry.error = uploadError(xhr);
        }
        updateChip(entry);
        updateSend();
      };
      xhr.onerror = () => { entry.status = "error"; entry.error = uploadError(xhr); updateChip(entry); updateSend(); };
      xhr.send(body);
      uploads.push(entry);
      renderUploads();
    }
  }

  function removeUpload(entry) {
    if (entry.status === "uploading") entry.xhr.abort();
    if (entry.preview) URL.revokeObjectURL(entry.preview);
    uploads = uploads.filter((u) => u !== entry);
    renderUploads();
  }

  function renderUploads() {
    els.attachments.replaceChildren(...uploads.map((u) => {
      if (!u.chip) {
        const thumb = u.preview ? h("img", { class: "chip-thumb", src: u.preview, alt: "" }) : h("span", { class: "chip-thumb file-icon", "aria-hidden": "true", text: "⬇" });
        u.bar = h("span", { class: "chip-bar" }, h("span", {}));
        u.note = h("span", { class: "chip-note" });
        u.chip = h("div", { class: "chip upload", "data-upload": String(u.id), title: u.file.name }, thumb,
          h("span", { class: "chip-body" }, h("span", { class: "chip-name", text: u.file.name }), u.bar, u.note),
          h("button", { type: "button", class: "chip-x", "aria-label": fmt(_("Remove %(file)s"), { file: u.file.name }), text: "×", onclick: () => removeUpload(u) }));
      }
      updateChip(u);
      return u.chip;
    }));
    updateSend();
  }

  function updateChip(u) {
    if (!u.chip) return;
    u.chip.dataset.status = u.status;
    u.chip.className = "chip upload " + u.status;
    u.bar.firstChild.style.width = `${Math.round((u.status === "uploading" ? u.progress : 1) * 100)}%`;
    u.bar.hidden = u.status !== "uploading";
    if (u.status === "uploading") u.note.textContent = `${Math.round(u.progress * 100)}%`;
    else if (u.status === "ready") u.note.textContent = fileSize(u.artifact.size) || _("ready");
    else u.note.textContent = u.error;
    u.note.setAttribute("role", u.status === "error" ? "alert" : "status");
  }

  function updateSend() {
    const busy = uploads.some((u) => u.status === "uploading");
    els.send.disabled = busy;
    els.send.title = busy ? _("Waiting for uploads to finish") : "";
  }

  function autosize() {
    els.input.style.height = "auto";
    els.input.style.height = Math.min(180, els.input.scrollHeight) + "px";
  }

  // --- wiring -------------------------------------------------------------------------------------------

  els.composer.addEventListener("submit", submit);
  els.input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) submit(e);
  });
  els.input.addEventListener("input", autosize);
  els.newChat.addEventListener("click", () => { resetView(); setConversation(null, false); lastId = null; els.input.focus(); });
  els.cancel.addEventListener("click", () => { if (currentRun) send({ type: "cancel", run_id: currentRun }); });
  els.loadEarlier.addEventListener("click", () => loadTranscript(true));
  // Link accounts: `/link` (ask for a code) or `/link CODE` (enter one) sent as this user's message; the host
  // answers it in the conversation itself.
  function linkSend(text) {
    els.asOperator.checked = false;
    els.input.value = text;
    submit(new Event("submit", { cancelable: true }));
    els.linkDialog.close();
  }
  els.linkAccounts.addEventListener("click", () => { els.linkCode.value = ""; els.linkDialog.showModal(); });
  $("link-ask").addEventListener("click", () => linkSend("/link"));
  $("link-enter").addEventListener("click", () => {
    const code = els.linkCode.value.trim();
    if (!els.linkCode.checkValidity() || !code) { els.linkCode.reportValidity(); els.linkCode.focus(); return; }
    linkSend("/link " + code);
  });
  els.linkCode.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); $("link-enter").click(); } });
  if (els.attach && config.attachments) {
    els.attach.addEventListener("change", () => { upload([...els.attach.files]); els.attach.value = ""; });
    els.composer.addEventListener("dragover", (e) => { e.preventDefault(); els.composer.classList.add("dropping"); });
    els.composer.addEventListener("dragleave", () => els.composer.classList.remove("dropping"));
    els.composer.addEventListener("drop", (e) => {
      e.preventDefault();
      els.composer.classList.remove("dropping");
      if (e.dataTransfer && e.dataTransfer.files.length) upload([...e.dataTransfer.files]);
    });
    els.input.addEventListener("paste", (e) => {
      const files = e.clipboardData ? [...e.clipboardData.files] : [];
      if (files.length) { e.preventDefault(); upload(files); }
    });
  }
  $("toggle-sidebar").addEventListener("click", () => {
    document.body.classList.toggle("sidebar-open");
    els.scrim.hidden = !document.body.classList.contains("sidebar-open");
  });
  $("toggle-panel").addEventListener("click", () => {
    document.body.classList.toggle("panel-open");
    els.scrim.hidden = !document.body.classList.contains("panel-open");
  });
  els.scrim.addEventListener("click", () => {
    document.body.classList.remove("sidebar-open", "panel-open");
    els.scrim.hidden = true;
  });

  fillTargets(config);
  els.target.addEventListener("change", () => { localStorage.setItem("langbot.chat.target." + config.workspace, els.target.value); showTarget(); });
  els.target.addEventListener("focus", () => refreshTargets(false));
  els.target.addEventListener("pointerdown", () => refreshTargets(false));
  window.addEventListener("focus", () => refreshTargets(false));
  els.messages.addEventListener("scroll", () => {
    const m = els.messages;
    stick = m.scrollHeight - m.scrollTop - m.clientHeight < 48;
    if (stick) els.newest.hidden = true;
  });
  els.newest.addEventListener("click", () => { scrollDown(true); els.newest.hidden = true; });
  for (const c of config.conversations.slice().reverse()) addConversation(c.conversation_id, c.title || c.preview, c.started_at);
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("c");
  if (fromHash) {
    conversationId = fromHash;
    setConversation(fromHash, false);
    lastId = null;
    needTranscript = true;
  }
  setConn("wait", _("connecting…"));
  connect();
})();
