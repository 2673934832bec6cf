// LangBot Host's website chat widget (README, "Website chat widget"). Embed with
//   <script src="https://<host>/widget.js" data-bot="<widget id>" data-lang="zh-hans" data-title="Help" async></script>
// It adds a chat bubble to the page, in a shadow root of its own (the page's CSS does not reach in, and its
// CSS does not leak out). The visitor's token is kept in this site's localStorage; the host issues it with a
// one-time socket ticket (POST /widget/<id>/session) only to sites the bot allows. Replies stream over the
// chat socket protocol (/ws/v1/widget/): subscribe, message, history.
(function () {
  "use strict";
  const script = document.currentScript;
  if (!script || !script.src) return;
  const botId = script.dataset.bot || "";
  if (!botId || window.__langbotWidgets && window.__langbotWidgets[botId]) return;
  (window.__langbotWidgets = window.__langbotWidgets || {})[botId] = true;
  const base = new URL(script.src, location.href).origin;
  const wsBase = base.replace(/^http/, "ws");
  const storageKey = `langbot-widget:${base}:${botId}`;
  const lang = script.dataset.lang || navigator.language || "";
  let strings = {
    title: "Chat", open: "Open the chat", close: "Close the chat", placeholder: "Type a message…", send: "Send",
    unavailable: "The chat is not available right now.", failed: "The reply failed.",
  };

  const CSS = `
    :host { all: initial; }
    * { box-sizing: border-box; font-family: system-ui, -apple-system, "Segoe UI", sans-serif; }
    .bubble { position: fixed; right: 20px; bottom: 20px; width: 56px; height: 56px; border-radius: 50%;
      border: 0; background: #2563eb; color: #fff; cursor: pointer; box-shadow: 0 4px 14px rgba(0,0,0,.25);
      z-index: 2147483646; display: flex; align-items: center; justify-content: center; padding: 0; }
    .bubble svg { width: 28px; height: 28px; fill: currentColor; }
    .panel { position: fixed; right: 20px; bottom: 88px; width: min(370px, calc(100vw - 40px));
      height: min(540px, calc(100vh - 120px)); background: #fff; color: #111827; border-radius: 12px;
      box-shadow: 0 10px 30px rgba(0,0,0,.25); display: flex; flex-direction: column; overflow: hidden;
      z-index: 2147483647; font-size: 14px; line-height: 1.45; }
    .panel[hidden] { display: none; }
    header { background: #2563eb; color: #fff; padding: 12px 14px; display: flex; align-items: center; }
    header h2 { font-size: 15px; margin: 0; flex: 1; font-weight: 600; }
    header button { background: transparent; border: 0; color: #fff; font-size: 20px; cursor: pointer; line-height: 1; }
    .messages { flex: 1; overflow-y: auto; padding: 12px; display: flex; flex-direction: column; gap: 8px;
      background: #f9fafb; }
    .msg { max-width: 85%; padding: 8px 11px; border-radius: 12px; white-space: pre-wrap; word-wrap: break-word; }
    .msg.user { align-self: flex-end; background: #2563eb; color: #fff; border-bottom-right-radius: 4px; }
    .msg.assistant { align-self: flex-start; background: #fff; border: 1px solid #e5e7eb; border-bottom-left-radius: 4px; }
    .msg.assistant.streaming::after { content: "▍"; opacity: .5; }
    .msg.assistant.failed { border-color: #fca5a5; }
    .note { align-self: center; color: #6b7280; font-size: 12px; text-align: center; }
    form { display: flex; gap: 8px; padding: 10px; border-top: 1px solid #e5e7eb; background: #fff; margin: 0; }
    textarea { flex: 1; resize: none; border: 1px solid #d1d5db; border-radius: 8px; padding: 8px; font-size: 14px;
      height: 40px; color: #111827; background: #fff; }
    form button { border: 0; border-radius: 8px; background: #2563eb; color: #fff; padding: 0 14px; cursor: pointer;
      font-size: 14px; }
    form button:disabled { opacity: .5; cursor: default; }
  `;

  const host = document.createElement("div");
  host.setAttribute("data-langbot-widget", botId);
  // The page's own rules may still reach the host element itself (`div { display: none !important }`):
  // inline !important declarations win over any stylesheet's.
  for (const [name, value] of [["all", "initial"], ["display", "block"], ["position", "static"]]) {
    host.style.setProperty(name, value, "important");
  }
  const root = host.attachShadow({ mode: "open" });
  root.innerHTML = `<style>${CSS}</style>
    <div class="panel" part="panel" hidden role="dialog">
      <header><h2 class="title"></h2><button type="button" class="close">×</button></header>
      <div class="messages" aria-live="polite"></div>
      <form><textarea rows="1"></textarea><button type="submit" class="send" disabled></button></form>
    </div>
    <button type="button" class="bubble" part="bubble"><svg viewBox="0 0 24 24" aria-hidden="true">
      <path d="M4 4h16a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H8l-4 4V6a2 2 0 0 1 2-2z"/></svg></button>`;
  const $ = (selector) => root.querySelector(selector);
  const els = {
    panel: $(".panel"), title: $(".title"), close: $(".close"), messages: $(".messages"), form: $("form"),
    input: $("textarea"), send: $(".send"), bubble: $(".bubble"),
  };

  let socket = null;
  let ready = false;
  let started = false;
  let lastId = null;          // the resume cursor: the newest run.event id seen
  let retry = 0;
  let unavailable = false;
  const runs = new Map();     // run id → its reply element
  const pending = [];         // messages typed before the socket was ready

  function applyStrings() {
    els.title.textContent = script.dataset.title || strings.title;
    els.bubble.setAttribute("aria-label", strings.open);
    els.close.setAttribute("aria-label", strings.close);
    els.input.placeholder = strings.placeholder;
    els.send.textContent = strings.send;
  }
  applyStrings();

  function note(text) {
    const el = document.createElement("div");
    el.className = "note";
    el.textContent = text;
    els.messages.append(el);
    scrollDown();
    return el;
  }
  function scrollDown() { els.messages.scrollTop = els.messages.scrollHeight; }
  function contentText(content) {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) return content.filter((c) => c && c.type === "text").map((c) => c.text || "").join("");
    return "";
  }
  function bubbleFor(role, text, before) {
    const el = document.createElement("div");
    el.className = `msg ${role}`;
    el.textContent = text;
    if (before) els.messages.insertBefore(el, before); else els.messages.append(el);
    return el;
  }
  function reply(runId) {
    let el = runs.get(runId);
    if (!el) {
      el = bubbleFor("assistant", "");
      el.classList.add("streaming");
      el.dataset.runId = runId;
      el.dataset.text = "";
      runs.set(runId, el);
    }
    return el;
  }
  function finish(el, failed) {
    el.classList.remove("streaming");
    el.classList.add(failed ? "failed" : "done");
    if (failed && !el.textContent) el.textContent = strings.failed;
  }

  function onRunEvent(message) {
    if (lastId === null || message.id > lastId) lastId = message.id;
    const { type, data } = message.event || {};
    const el = reply(message.run_id);
    if (type === "message.delta") {
      el.dataset.text += contentText(data && data.chunk && data.chunk.content);
      el.textContent = el.dataset.text;
    } else if (type === "message.completed") {
      el.dataset.text = contentText(data && data.message && data.message.content);
      el.textContent = el.dataset.text;
    } else if (type === "run.completed") {
      finish(el, false);
    } else if (type === "run.failed") {
      finish(el, true);
    }
    scrollDown();
  }

  // History is the transcript, newest first; shown above what arrived live, without the runs shown already.
  function onHistory(message) {
    const first = els.messages.firstChild;
    for (const item of [...message.items].reverse()) {
      if (item.role === "assistant" && item.run_id && runs.has(item.run_id)) continue;
      const el = bubbleFor(item.role, item.content, first);
      el.classList.add("done");
      if (item.run_id) { el.dataset.runId = item.run_id; runs.set(item.run_id, el); }
    }
    host.dataset.history = "loaded";
    scrollDown();
  }

  function onMessage(message) {
    switch (message.type) {
      case "run.event": onRunEvent(message); break;
      case "run.status":
        if (["completed", "failed", "cancelled", "timeout"].includes(message.status)) {
          const el = runs.get(message.run_id);
          if (el && el.classList.contains("streaming")) finish(el, message.status !== "completed");
        } else if (message.run_id) reply(message.run_id);
        break;
      case "subscribed":
        if (!started) { started = true; send({ type: "history" }); }
        ready = true;
        els.send.disabled = false;
        while (pending.length) send(pending.shift());
        break;
      case "history": onHistory(message); break;
      case "transcript.item":
        if (message.item && message.item.content) bubbleFor("assistant", message.item.content).classList.add("done");
        scrollDown();
        break;
      case "error": note(message.message || message.code); break;
      default: break; // pings and the rest
    }
  }

  function send(message) {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
  }

  async function session(token) {
    const response = await fetch(`${base}/widget/${encodeURIComponent(botId)}/session`, {
      method: "POST", mode: "cors", credentials: "omit", cache: "no-store",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: token || undefined, lang }),
    });
    let body = {};
    try { body = await response.json(); } catch (e) { body = {}; }
    return { status: response.status, body };
  }

  async function connect() {
    let stored = null;
    try { stored = localStorage.getItem(storageKey); } catch (e) { stored = null; }
    let answer;
    try {
      answer = await session(stored);
      if (answer.status === 403 && answer.body.error && answer.body.error.code === "widget.token_invalid") {
        try { localStorage.removeItem(storageKey); } catch (e) { /* storage may be off */ }
        answer = await session(null);
      }
    } catch (e) {
      answer = { status: 0, body: {} };
    }
    if (answer.status !== 201) {
      const error = answer.body.error;
      if (answer.status === 429) return later(Number(answer.body.retry_after) || 30, error && error.message);
      unavailable = true;
      host.dataset.state = "unavailable";
      note((error && error.message) || strings.unavailable);
      return;
    }
    const body = answer.body;
    try { localStorage.setItem(storageKey, body.token); } catch (e) { /* a private window: one visit only */ }
    if (body.strings) { strings = { ...strings, ...body.strings }; if (!script.dataset.title && body.title) strings.title = body.title; applyStrings(); }
    socket = new WebSocket(wsBase + body.ws_path);
    socket.onopen = () => {
      retry = 0;
      host.dataset.state = "ok";
      const subscribe = { type: "subscribe" };
      if (lastId !== null) subscribe.after_id = lastId;
      socket.send(JSON.stringify(subscribe));
    };
    socket.onmessage = (e) => { try { onMessage(JSON.parse(e.data)); } catch (err) { /* not JSON */ } };
    socket.onclose = () => {
      ready = false;
      els.send.disabled = true;
      host.dataset.state = "closed";
      if (!unavailable) later(Math.min(30, 2 ** retry++), null);
    };
  }

  function later(seconds, text) {
    if (text) note(text);
    setTimeout(connect, seconds * 1000);
  }

  els.bubble.addEventListener("click", () => {
    const opening = els.panel.hidden;
    els.panel.hidden = !opening;
    if (opening) {
      if (!socket && !unavailable) { host.dataset.state = "connecting"; connect(); }
      els.input.focus();
    }
  });
  els.close.addEventListener("click", () => { els.panel.hidden = true; });
  els.form.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = els.input.value.trim();
    if (!text) return;
    els.input.value = "";
    bubbleFor("user", text).classList.add("done");
    scrollDown();
    const message = { type: "message", text };
    if (ready) send(message); else pending.push(message);
  });
  els.input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); els.form.requestSubmit(); }
  });

  function mount() { document.body.append(host); }
  if (document.body) mount(); else document.addEventListener("DOMContentLoaded", mount);
})();
