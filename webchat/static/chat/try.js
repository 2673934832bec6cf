// The binding admin's "try it" box (templates/admin/bindings/agentbinding/change_form.html): it speaks the
// chat socket's protocol (webchat/consumers.py) with a one-time ticket its page asks for
// (webchat/trying.py), sends each message to this binding, and shows each reply as it streams in.
(function () {
  "use strict";
  const box = document.getElementById("try-binding");
  if (!box) return;
  const _ = window.gettext || ((text) => text);
  const log = document.getElementById("try-log");
  const input = document.getElementById("try-text");
  const button = document.getElementById("try-send");
  const bindingId = box.dataset.bindingId;
  const replies = new Map();
  let ws = null;
  let conversationId = null;
  let pending = [];

  function line(kind, text) {
    const el = document.createElement("div");
    el.className = "try-msg try-" + kind;
    el.textContent = text;
    log.append(el);
    return el;
  }

  function csrf() {
    const field = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (field) return field.value;
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function contentText(content) {
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return "";
    return content.filter((part) => part && part.type === "text").map((part) => part.text || "").join("");
  }

  function reply(runId) {
    let view = replies.get(runId);
    if (!view) {
      const el = line("reply streaming", "");
      el.dataset.runId = runId;
      view = { el, text: "" };
      replies.set(runId, view);
    }
    return view;
  }

  function onRunEvent(runId, event) {
    const view = reply(runId);
    const data = event.data || {};
    if (event.type === "message.delta") {
      view.text += contentText(data.chunk && data.chunk.content);
      view.el.textContent = view.text;
    } else if (event.type === "message.completed") {
      view.text = contentText(data.message && data.message.content);
      view.el.textContent = view.text;
    } else if (event.type === "run.completed") {
      view.el.classList.remove("streaming");
      view.el.classList.add("done");
      box.dataset.state = "done";
    } else if (event.type === "run.failed") {
      view.el.classList.remove("streaming");
      view.el.classList.add("failed");
      line("error", `${data.code || "error"}: ${data.message || ""}`);
      box.dataset.state = "failed";
    }
  }

  function onMessage(message) {
    if (message.type === "run.status") {
      if (message.conversation_id) conversationId = message.conversation_id;
      reply(message.run_id);
    } else if (message.type === "run.event") {
      onRunEvent(message.run_id, message.event || {});
    } else if (message.type === "error") {
      line("error", `${message.code}: ${message.message || ""}`);
      box.dataset.state = "failed";
    }
  }

  async function connect() {
    const response = await fetch(box.dataset.ticketUrl, {
      method: "POST", credentials: "same-origin", headers: { "X-CSRFToken": csrf() },
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error((body.error && body.error.message) || response.statusText);
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    ws = new WebSocket(proto + location.host + body.url);
    ws.onopen = () => { for (const message of pending) ws.send(JSON.stringify(message)); pending = []; };
    ws.onmessage = (event) => {
      try { onMessage(JSON.parse(event.data)); } catch (e) { /* not JSON: ignored */ }
    };
    ws.onclose = (event) => {
      ws = null;
      if (event.code === 4403 || event.code === 4401) line("error", _("The try-it connection was refused."));
    };
  }

  async function send() {
    const text = input.value.trim();
    if (!text) return;
    input.value = "";
    line("user", text);
    box.dataset.state = "sent";
    const message = { type: "message", binding_id: bindingId, text };
    if (conversationId) message.conversation_id = conversationId;
    if (ws && ws.readyState === WebSocket.OPEN) { ws.send(JSON.stringify(message)); return; }
    pending.push(message);
    if (ws) return; // still connecting: sent on open
    try { await connect(); } catch (error) {
      pending = [];
      line("error", error.message);
      box.dataset.state = "failed";
    }
  }

  button.addEventListener("click", send);
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); send(); }
  });
})();
