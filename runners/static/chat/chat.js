// LangBot Host debug chat. Plain JS, no build step. Talks to /ws/v1/chat/ (DESIGN §3.3) and reads
// transcripts over REST. Resume: the last `id` of a run.event is the cursor; after a reconnect the page
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
  };
  const ACTIVE = new Set(["queued", "running"]);
  const PING_SECONDS = 20;

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
  let pendingFiles = [];

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
    const m = els.messages;
    if (force || m.scrollHeight - m.scrollTop - m.clientHeight < 160) m.scrollTop = m.scrollHeight;
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
      setConn("ok", "connected");
      if (conversationId) subscribe();
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
        setConn("bad", "signed out");
        location.href = "/chat/login/?next=/chat/";
        return;
      }
      if (event.code === 4403) { setConn("bad", "no workspace"); return; }
      setConn("wait", "reconnecting…");
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
        break;
      case "error": onError(message); break;
      case "transcript.item":
        if (message.item && message.item.id && !els.messages.querySelector(`[data-transcript-id="${message.item.id}"]`)) {
          els.empty.hidden = true;
          els.messages.append(transcriptItem(message.item));
          scrollDown(false);
        }
        break;
      default: break; // ping and future additions
    }
  }

  function onError(message) {
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
    const status = h("span", { class: "status queued", text: "queued" });
    const meta = h("div", { class: "meta" }, status, h("span", { class: "mono", text: runId.slice(0, 8) }));
    const el = h("div", { class: "msg assistant streaming", "data-run-id": runId }, tools, bubble, files, meta);
    els.messages.append(el);
    view = { el, bubble, tools, files, status, text: "", toolCards: new Map(), state: "queued", error: null };
    runs.set(runId, view);
    return view;
  }

  function onRunEvent(message) {
    if (lastId === null || message.id > lastId) lastId = message.id;
    const view = runView(message.run_id);
    const { type, data } = message.event;
    if (type === "message.delta") {
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
      addPanelItem(els.state, h("li", {}, h("span", { class: "k", text: `${data.scope}:${data.key}` }),
        h("pre", { text: pretty(data.value) })));
    } else if (type === "action.requested") {
      addPanelItem(els.actions, h("li", {}, h("span", { class: "k", text: data.action }),
        h("pre", { text: pretty({ target: data.target, payload: data.payload }) })));
    } else if (type === "run.completed") {
      view.el.classList.remove("streaming");
      setRunState(message.run_id, "completed");
    } else if (type === "run.failed") {
      view.el.classList.remove("streaming");
      view.el.classList.add("failed");
      view.error = data;
      view.el.append(h("div", { class: "error-line", text: `${data.code}: ${data.message}` }));
      setRunState(message.run_id, data.code === "cancelled" ? "cancelled" : "failed");
    }
    if (!view.text && view.bubble.textContent === "" && type !== "message.delta") view.bubble.hidden = true;
    if (view.text) view.bubble.hidden = false;
    scrollDown(false);
  }

  function toolCard(view, type, data) {
    let card = view.toolCards.get(data.tool_call_id);
    if (!card) {
      const state = h("span", { class: "status running tool-state", text: "running" });
      const body = h("div", {});
      const el = h("details", { class: "tool-card", "data-tool-call-id": data.tool_call_id },
        h("summary", {}, h("span", { class: "tool-name", text: data.tool_name }), state),
        body);
      view.tools.append(el);
      card = { el, state, body };
      view.toolCards.set(data.tool_call_id, card);
    }
    if (type === "tool.call.started") {
      card.body.append(h("span", { class: "tool-label", text: "parameters" }), h("pre", { text: pretty(data.parameters || {}) }));
    } else {
      const failed = !!data.error;
      card.state.className = "status tool-state " + (failed ? "failed" : "completed");
      card.state.textContent = failed ? "error" : "done";
      card.body.append(h("span", { class: "tool-label", text: failed ? "error" : "result" }),
        h("pre", { text: pretty(failed ? data.error : data.result) }));
    }
  }

  function fileLink(item) {
    const id = item.artifact_id;
    const name = item.name || item.file_name || id || "file";
    const mime = item.mime_type || "";
    const href = id ? `${config.api}/artifacts/${encodeURIComponent(id)}/content?${wsParam()}` : (item.file_url || item.image_url);
    if (!href) return h("span", { class: "file", text: `⬇ ${name}` });
    if (mime.startsWith("image/") || item.type === "image_url") {
      return h("a", { class: "file image", href, target: "_blank", rel: "noopener" }, h("img", { src: href, alt: name, loading: "lazy" }));
    }
    return h("a", { class: "file", href, target: "_blank", rel: "noopener", text: `⬇ ${name}` });
  }

  function addPanelItem(list, item) {
    if (list.firstElementChild && list.firstElementChild.classList.contains("muted")) list.innerHTML = "";
    list.prepend(item);
  }

  function onRunStatus(message) {
    if (message.conversation_id && !conversationId) {
      // The reply to our first message of a new conversation names it.
      setConversation(message.conversation_id, false);
      addConversation(message.conversation_id, els.input.dataset.lastText || "");
    }
    runView(message.run_id);
    setRunState(message.run_id, message.status, message);
  }

  function setRunState(runId, status, message) {
    const view = runView(runId);
    view.state = status;
    view.status.className = "status " + status;
    view.status.textContent = status;
    if (!ACTIVE.has(status)) view.el.classList.remove("streaming");
    if (message && message.runner_id) view.runner = message.runner_id;
    if (message && message.binding_id) view.binding = message.binding_id;
    if (message && message.status_reason) view.reason = message.status_reason;
    if (!currentRun || currentRun === runId || ACTIVE.has(status)) currentRun = runId;
    renderRunInfo();
  }

  function renderRunInfo() {
    const view = currentRun && runs.get(currentRun);
    if (!view) {
      els.runInfo.textContent = "No run yet.";
      els.cancel.hidden = true;
      return;
    }
    const rows = [["run", currentRun], ["status", view.state]];
    if (view.reason) rows.push(["reason", view.reason]);
    if (view.binding) rows.push(["binding", view.binding]);
    if (view.runner) rows.push(["runner", view.runner]);
    const dl = h("dl", {});
    for (const [k, v] of rows) dl.append(h("dt", { text: k }), h("dd", { class: k === "status" ? "" : "mono", text: v }));
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

  function transcriptItem(item) {
    const role = ["user", "assistant", "tool", "system"].includes(item.role) ? item.role : "system";
    const files = h("div", { class: "files" });
    for (const a of item.artifacts || []) files.append(fileLink(a));
    for (const c of contentFiles(item.contents)) files.append(fileLink(c));
    const when = new Date(item.created_at);
    const meta = h("div", { class: "meta" }, h("span", { text: when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) }));
    const attrs = { class: `msg ${role} done`, "data-transcript-id": item.id };
    if (item.run_id) attrs["data-run-id"] = item.run_id;
    const bubble = h("div", { class: "bubble", text: item.content || contentText(item.contents) });
    if (!bubble.textContent) bubble.hidden = true;
    return h("div", attrs, bubble, files, meta);
  }

  async function loadTranscript(earlier) {
    const id = conversationId;
    let url = `${config.api}/conversations/${encodeURIComponent(id)}/transcript?${wsParam()}&limit=100`;
    if (earlier && nextBefore) url += `&before=${nextBefore}`;
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok || id !== conversationId) return;
    const page = await response.json();
    nextBefore = page.next_before;
    els.loadEarlier.hidden = !nextBefore;
    // Items come newest first; they go above everything already shown, oldest at the top.
    const anchor = els.loadEarlier.nextSibling;
    const fragment = document.createDocumentFragment();
    for (const item of page.items.slice().reverse()) {
      // A reply whose run is already on screen (it streamed in) is not shown twice.
      if (item.run_id && runs.has(item.run_id)) continue;
      if (els.messages.querySelector(`[data-transcript-id="${item.id}"]`)) continue;
      fragment.append(transcriptItem(item));
    }
    if (fragment.childNodes.length) els.empty.hidden = true;
    els.messages.insertBefore(fragment, earlier ? anchor : els.empty.nextSibling);
    if (!earlier) scrollDown(true);
  }

  // --- conversations ------------------------------------------------------------------------------------

  function setConversation(id, load) {
    conversationId = id;
    els.title.textContent = id ? "Conversation" : "New conversation";
    els.subtitle.textContent = id || "Say something to start one.";
    for (const b of els.conversations.querySelectorAll("button")) b.classList.toggle("active", b.dataset.id === id);
    if (id) history.replaceState(null, "", "#c=" + encodeURIComponent(id));
    else history.replaceState(null, "", location.pathname);
    if (load) {
      lastId = null;
      needTranscript = true;
      subscribe();
    }
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
    for (const list of [els.state, els.actions, els.artifacts]) list.innerHTML = '<li class="muted small">None.</li>';
    renderRunInfo();
  }

  function addConversation(id, preview) {
    if (els.conversations.querySelector(`[data-id="${CSS.escape(id)}"]`)) return;
    const button = h("button", { type: "button", "data-id": id, onclick: () => openConversation(id) },
      h("span", { class: "conv-preview", text: preview || "(no text)" }), h("span", { class: "conv-id", text: id }));
    if (id === conversationId) button.classList.add("active");
    els.conversations.prepend(h("li", {}, button));
  }

  // --- composer -----------------------------------------------------------------------------------------

  function fillTargets() {
    const options = [h("option", { value: "", text: "Workspace default" })];
    if (config.bots.length) {
      const group = h("optgroup", { label: "Bots" });
      for (const b of config.bots) group.append(h("option", { value: "bot:" + b.bot_id, text: b.name }));
      options.push(group);
    }
    if (config.bindings.length) {
      const group = h("optgroup", { label: "Bindings" });
      for (const b of config.bindings) {
        const label = `${b.name} — ${b.runner_id.replace(/^plugin:/, "")}${b.replies ? "" : " (observer)"}`;
        group.append(h("option", { value: "binding:" + b.binding_id, text: label }));
      }
      options.push(group);
    }
    els.target.replaceChildren(...options);
    const saved = localStorage.getItem("langbot.chat.target." + config.workspace);
    if (saved && [...els.target.options].some((o) => o.value === saved)) els.target.value = saved;
    els.target.addEventListener("change", () => localStorage.setItem("langbot.chat.target." + config.workspace, els.target.value));
  }

  function submit(event) {
    event.preventDefault();
    const text = els.input.value.trim();
    if (!text && !pendingFiles.length) return;
    const message = { type: "message", text };
    if (conversationId) message.conversation_id = conversationId;
    const target = els.target.value;
    if (target.startsWith("bot:")) message.bot_id = target.slice(4);
    if (target.startsWith("binding:")) message.binding_id = target.slice(8);
    if (pendingFiles.length) message.attachments = pendingFiles.map((f) => ({ artifact_id: f.artifact_id }));
    if (!send(message)) { systemLine("Not connected — the message was not sent. Reconnecting…"); return; }
    els.empty.hidden = true;
    const files = h("div", { class: "files" });
    for (const f of pendingFiles) files.append(fileLink(f));
    els.messages.append(h("div", { class: "msg user" }, text ? h("div", { class: "bubble", text }) : null, files));
    els.input.dataset.lastText = text;
    els.input.value = "";
    autosize();
    pendingFiles = [];
    els.attachments.replaceChildren();
    scrollDown(true);
  }

  async function upload(fileList) {
    for (const file of fileList) {
      const chip = h("span", { class: "chip", text: `uploading ${file.name}…` });
      els.attachments.append(chip);
      const body = new FormData();
      body.append("file", file);
      try {
        const response = await fetch(`${config.api}/artifacts?${wsParam()}`, {
          method: "POST", body, credentials: "same-origin", headers: { "X-CSRFToken": csrf() },
        });
        if (!response.ok) throw new Error(`upload answered ${response.status}`);
        const artifact = await response.json();
        const ref = { artifact_id: artifact.artifact_id || artifact.id, name: artifact.name || file.name, mime_type: artifact.mime_type || file.type };
        pendingFiles.push(ref);
        chip.textContent = ref.name;
      } catch (error) {
        chip.textContent = `${file.name}: ${error.message}`;
      }
    }
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
  if (els.attach) els.attach.addEventListener("change", () => { upload([...els.attach.files]); els.attach.value = ""; });
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

  fillTargets();
  for (const c of config.conversations.slice().reverse()) addConversation(c.conversation_id, c.preview);
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("c");
  if (fromHash) {
    conversationId = fromHash;
    setConversation(fromHash, false);
    lastId = null;
    needTranscript = true;
  }
  setConn("wait", "connecting…");
  connect();
})();
