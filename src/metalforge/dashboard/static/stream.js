// The live event stream: GET /v1/events read with fetch() and parsed here (the
// browser's EventSource cannot send the credentials' headers), reconnecting with
// Last-Event-ID, and the indicator in the top bar that says where it stands.

import { errorText } from "./api.js";
import { $ } from "./dom.js";
import { showError } from "./notices.js";
import { app, authHeaders, credentialsRefused } from "./session.js";

const RECONNECT_MIN_MS = 1000;
const RECONNECT_SPREAD_MS = 2000;
// The service sends a keep-alive every ~15 s; a quiet stream is a dead one.
const STREAM_SILENCE_MS = 45000;

// Server-sent events read with fetch(): EventSource cannot send the
// credentials' headers. Reconnects after 1-3 s with Last-Event-ID, except
// when the service refuses the credentials or has no stream at all.
class LiveStream {
  constructor(path, onEvent) {
    this.path = path;
    this.onEvent = onEvent;
    this.lastId = null;
    this.stopped = false;
    this.controller = null;
    this.watchdog = null;
  }

  start() {
    this.run();
    return this;
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
    window.clearTimeout(this.watchdog);
  }

  touch() {
    window.clearTimeout(this.watchdog);
    this.watchdog = window.setTimeout(() => {
      if (this.controller) this.controller.abort();
    }, STREAM_SILENCE_MS);
  }

  async run() {
    while (!this.stopped) {
      this.controller = new AbortController();
      const headers = authHeaders(app.creds);
      headers.Accept = "text/event-stream";
      if (this.lastId !== null) headers["Last-Event-ID"] = this.lastId;
      try {
        const response = await fetch(this.path, {
          headers,
          cache: "no-store",
          credentials: "omit",
          signal: this.controller.signal,
        });
        if (this.stopped) return;
        if (response.status === 401) {
          credentialsRefused(errorText(401, await response.text()));
          return;
        }
        if (response.status === 403 || response.status === 404) {
          const why = errorText(response.status, await response.text());
          setLive("unavailable", "live updates unavailable", `${response.status}: ${why}`);
          if (response.status === 403) showError(`Live updates refused: ${why}`);
          return;
        }
        if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
        // "live" only once the service says the stream is subscribed ("ready").
        this.touch();
        await this.read(response.body.getReader());
      } catch (_err) {
        // A failed or aborted read: reconnect below unless stopped.
      }
      window.clearTimeout(this.watchdog);
      if (this.stopped) return;
      setLive("reconnecting", "reconnecting…");
      const delay = RECONNECT_MIN_MS + Math.random() * RECONNECT_SPREAD_MS;
      await new Promise((resolve) => window.setTimeout(resolve, delay));
    }
  }

  async read(reader) {
    const decoder = new TextDecoder();
    const parser = new SseParser((event) => {
      if (event.id !== null) this.lastId = event.id;
      if (event.type === "ready") setLive("live", "live");
      if (!this.stopped) this.onEvent(event);
    });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      this.touch();
      parser.feed(decoder.decode(value, { stream: true }));
      if (this.stopped) {
        reader.cancel().catch(() => {});
        return;
      }
    }
    parser.feed(decoder.decode());
  }
}

// The text/event-stream format: lines "field: value", ":" comments, and a
// blank line ending each event; a chunk may end anywhere, even inside "\r\n".
class SseParser {
  constructor(dispatch) {
    this.dispatch = dispatch;
    this.buffer = "";
    this.reset();
  }

  reset() {
    this.type = "";
    this.data = [];
    this.id = null;
  }

  feed(chunk) {
    this.buffer += chunk;
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (!match) return;
      // A lone "\r" at the end may be the first half of "\r\n": wait for more.
      if (match[0] === "\r" && match.index === this.buffer.length - 1) return;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      this.line(line);
    }
  }

  line(line) {
    if (line === "") {
      if (this.data.length || this.type) {
        this.dispatch({ type: this.type || "message", data: this.data.join("\n"), id: this.id });
      }
      this.reset();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.type = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.id = value;
  }
}

function setLive(state, label, detail) {
  const badge = $("live-status");
  badge.dataset.live = state;
  badge.className = `live live-${state}`;
  badge.textContent = label;
  badge.title = detail ? `${label} (${detail})` : label;
}

export function openStream(path, onEvent) {
  closeStream();
  setLive("connecting", "connecting…");
  app.stream = new LiveStream(path, (event) => {
    let data = {};
    try {
      data = event.data ? JSON.parse(event.data) : {};
    } catch (_err) {
      return;
    }
    if (data && typeof data === "object") onEvent(event.type, data);
  }).start();
}

export function closeStream() {
  if (app.stream) app.stream.stop();
  app.stream = null;
  setLive("off", "not live", "this view is read once; Refresh reads it again");
}
