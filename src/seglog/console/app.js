// seglog web console: vanilla JavaScript, no build step, no third-party code.
//
// Every value that comes from the server (topic names, record data, tags, error messages)
// reaches the page as a text node or an attribute value: never through innerHTML. The
// server also sends a Content-Security-Policy that forbids inline script.
"use strict";

(() => {
  const KEY_STORE = "seglog.console.key";
  const REFRESH_MS = 3000;
  const TAIL_MAX = 500;
  const CHART_POINTS = 60;

  // ------------------------------------------------------------------ DOM helpers

  const $ = (sel) => document.querySelector(sel);

  /** h("td", {class: "x", "data-col": "head", onclick: f}, "text", child, [more]) */
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else if (k === "class") el.className = v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    append(el, kids);
    return el;
  }

  function append(el, kids) {
    for (const kid of kids) {
      if (kid === null || kid === undefined || kid === false) continue;
      if (Array.isArray(kid)) append(el, kid);
      else el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
  }

  function say(el, text, kind) {
    el.textContent = text || "";
    el.className = "msg" + (text ? " " + (kind || "ok") : "");
  }

  // ------------------------------------------------------------------ formatting

  const fmtInt = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"));

  function fmtBytes(n) {
    if (n === null || n === undefined) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let v = Number(n);
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
  }

  function fmtRate(perSec) {
    if (perSec === null || perSec === undefined) return "—";
    if (perSec === 0) return "0/s";
    return perSec >= 100 ? `${Math.round(perSec)}/s` : `${perSec.toFixed(1)}/s`;
  }

  function fmtTs(ms) {
    if (ms === null || ms === undefined) return "—";
    return new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
  }

  function fmtDuration(ms) {
    let s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400);
    s -= d * 86400;
    const hh = Math.floor(s / 3600);
    s -= hh * 3600;
    const mm = Math.floor(s / 60);
    s -= mm * 60;
    return (d ? `${d}d ` : "") + (d || hh ? `${hh}h ` : "") + `${mm}m ${s}s`;
  }

  const TOMBSTONE_WHY = {
    from_seq_too_old: "were removed before this reader got to them (the start point is older than the oldest record kept)",
    cap: "were evicted by the topic's size cap",
    ttl: "expired (the topic's TTL)",
    mixed: "were evicted by the size cap and the TTL",
    recreated: "are gone because the topic was deleted and created again",
    source_trim: "were trimmed at the router's source before they were forwarded",
  };

  function tombstoneWords(t) {
    const span = t.gap_from === t.gap_to ? `Record ${t.gap_from}` : `Records ${t.gap_from}–${t.gap_to}`;
    const why = TOMBSTONE_WHY[t.reason] || `are gone (reason: ${t.reason})`;
    const verb = t.gap_from === t.gap_to ? why.replace(/^were /, "was ").replace(/^are /, "is ") : why;
    return `${span} ${verb}; the oldest record kept is ${t.earliest_seq}, the head is ${t.head_seq}.`;
  }

  // ------------------------------------------------------------------ API

  const apiKey = () => sessionStorage.getItem(KEY_STORE) || "";

  class ApiError extends Error {
    constructor(status, code, message, detail) {
      super(message);
      this.status = status;
      this.code = code;
      this.detail = detail;
    }
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    const key = apiKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, "unreachable", `the server did not answer (${e.message})`);
    }
    const text = await resp.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch (_) {
      json = null;
    }
    if (!resp.ok) {
      const err = json && json.error;
      throw new ApiError(
        resp.status,
        err ? err.code : `http_${resp.status}`,
        err ? err.message : text || resp.statusText,
        err ? err.detail : undefined,
      );
    }
    return json;
  }

  const enc = encodeURIComponent;

  function errText(e) {
    if (!(e instanceof ApiError)) return String(e && e.message ? e.message : e);
    let hint = "";
    if (e.status === 401) hint = " — paste an API key above";
    else if (e.status === 403) hint = " — this key lacks the scope or name prefix for this";
    return `${e.status ? e.status + " " : ""}${e.code}: ${e.message}${hint}`;
  }

  // ------------------------------------------------------------------ key

  function showKeyState() {
    $("#key-state").textContent = apiKey() ? "key set (this tab only)" : "no key";
  }

  function initKey() {
    $("#key").value = apiKey();
    showKeyState();
    $("#key-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const k = $("#key").value.trim();
      if (k) sessionStorage.setItem(KEY_STORE, k);
      else sessionStorage.removeItem(KEY_STORE);
      showKeyState();
      route();
    });
    $("#key-forget").addEventListener("click", () => {
      sessionStorage.removeItem(KEY_STORE);
      $("#key").value = "";
      showKeyState();
      route();
    });
  }

  // ------------------------------------------------------------------ routing

  let viewTimer = null;
  const views = {};

  function route() {
    const parts = (location.hash || "#/topics").replace(/^#\/?/, "").split("/");
    const name = views[parts[0]] ? parts[0] : "topics";
    const arg = parts.length > 1 ? decodeURIComponent(parts.slice(1).join("/")) : "";
    if (viewTimer) clearInterval(viewTimer);
    viewTimer = null;
    for (const sec of document.querySelectorAll(".view")) sec.hidden = sec.id !== `view-${name}`;
    for (const a of document.querySelectorAll("nav a")) {
      a.classList.toggle("active", a.dataset.view === name);
    }
    views[name](arg);
  }

  function every(fn) {
    // A background tab does not poll (browsers throttle its timers anyway).
    viewTimer = setInterval(() => {
      if (!document.hidden) fn();
    }, REFRESH_MS);
  }

  // ------------------------------------------------------------------ topics

  const prevHeads = new Map(); // topic -> {head, at}
  let knownTopics = [];

  async function listTopics(prefix) {
    const names = [];
    let cursor = "";
    for (let page = 0; page < 20; page += 1) {
      const q = `page_size=1000&prefix=${enc(prefix)}&cursor=${enc(cursor)}`;
      const r = await api("GET", `/v0/topics?${q}`);
      names.push(...r.topics);
      if (!r.next_cursor) break;
      cursor = r.next_cursor;
    }
    return names;
  }

  async function inBatches(items, n, fn) {
    const out = [];
    for (let i = 0; i < items.length; i += n) {
      out.push(...(await Promise.all(items.slice(i, i + n).map(fn))));
    }
    return out;
  }

  function setTopicNames(names) {
    knownTopics = names;
    const dl = $("#topic-names");
    dl.replaceChildren(...names.map((n) => h("option", { value: n })));
  }

  async function refreshTopics() {
    const msg = $("#topics-msg");
    let listed;
    try {
      listed = await listTopics($("#topics-prefix").value.trim());
    } catch (e) {
      say(msg, errText(e), "error");
      $("#topics-table tbody").replaceChildren();
      return;
    }
    setTopicNames(listed.map((t) => t.topic));
    // The list has heads and sizes; per-topic state adds type, queue fields, config.
    const states = await inBatches(listed.slice(0, 300), 8, (t) =>
      api("GET", `/v0/topics/${enc(t.topic)}?touch=false`).catch(() => null),
    );
    const now = performance.now();
    const rows = listed.map((t, i) => {
      const st = states[i] || null;
      const prev = prevHeads.get(t.topic);
      let rate = null;
      if (prev && now > prev.at) rate = Math.max(0, t.head_seq - prev.head) / ((now - prev.at) / 1000);
      prevHeads.set(t.topic, { head: t.head_seq, at: now });
      return topicRow(t, st, rate);
    });
    $("#topics-table tbody").replaceChildren(...rows);
    $("#topics-empty").hidden = rows.length > 0;
    $("#topics-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (msg.classList.contains("error")) say(msg, "");
  }

  function topicRow(t, st, rate) {
    const q = st && st.queue;
    const durability = st ? st.config.durability : t.durable ? "fsync" : "";
    const name = t.topic;
    return h(
      "tr",
      { "data-topic": name },
      h("td", { "data-col": "topic" }, h("a", { href: `#/browse/${enc(name)}` }, name)),
      h("td", { "data-col": "type" }, st ? st.type : ""),
      h("td", { "data-col": "earliest", class: "num" }, fmtInt(t.earliest_seq)),
      h("td", { "data-col": "head", class: "num" }, fmtInt(t.head_seq)),
      h("td", { "data-col": "count", class: "num" }, fmtInt(t.count)),
      h("td", { "data-col": "size", class: "num" }, fmtBytes(t.bytes)),
      h("td", { "data-col": "rate", class: "num" }, fmtRate(rate)),
      h("td", { "data-col": "durability" }, durability),
      h("td", { "data-col": "queue", class: "num" }, q ? `${fmtInt(q.ready)} / ${fmtInt(q.in_flight)} / ${fmtInt(q.dead_lettered)}` : ""),
      h("td", { "data-col": "last_write" }, st ? fmtTs(st.last_write_ts) : ""),
      h(
        "td",
        { class: "actions" },
        h("a", { href: `#/browse/${enc(name)}` }, "browse"),
        h("a", { href: `#/tail/${enc(name)}` }, "tail"),
        h("button", { type: "button", "data-action": "edit", onclick: () => editTopic(name) }, "edit"),
        h("button", { type: "button", "data-action": "delete", class: "danger", onclick: () => deleteTopic(name) }, "delete"),
      ),
    );
  }

  const FORM_NUMS = ["ttl_ms", "cap_records", "cap_bytes", "lease_ms", "max_deliveries"];
  let editing = null; // the config being altered, or null when creating

  function formValues() {
    const f = $("#topic-form").elements;
    const cfg = {
      type: f.type.value,
      durability: f.durability.value,
      discard: f.discard.value,
      dead_letter: f.dead_letter.value.trim() || null,
    };
    for (const k of FORM_NUMS) cfg[k] = Number(f[k].value || 0);
    return { name: f.name.value.trim(), cfg };
  }

  function resetTopicForm() {
    editing = null;
    const form = $("#topic-form");
    form.reset();
    form.elements.name.readOnly = false;
    $("#topic-form-title").textContent = "Create a topic";
    $("#topic-submit").textContent = "Create";
    $("#topic-cancel").hidden = true;
  }

  async function editTopic(name) {
    const out = $("#topic-form-msg");
    try {
      const st = await api("GET", `/v0/topics/${enc(name)}?touch=false`);
      editing = st.config;
      const f = $("#topic-form").elements;
      f.name.value = name;
      f.name.readOnly = true;
      for (const k of ["type", "durability", "discard"]) f[k].value = st.config[k];
      for (const k of FORM_NUMS) f[k].value = st.config[k];
      f.dead_letter.value = st.config.dead_letter || "";
      $("#topic-form-title").textContent = `Alter topic ${name}`;
      $("#topic-submit").textContent = "Save changes";
      $("#topic-cancel").hidden = false;
      say(out, "");
      $("#topic-form").scrollIntoView({ block: "nearest" });
    } catch (e) {
      say(out, errText(e), "error");
    }
  }

  async function submitTopic(ev) {
    ev.preventDefault();
    const out = $("#topic-form-msg");
    const { name, cfg } = formValues();
    try {
      if (editing) {
        // Read-modify-write: a PUT replaces the whole config (API §0.11), so start from
        // the stored one and change only what the form shows.
        const st = await api("GET", `/v0/topics/${enc(name)}?touch=false`);
        const next = { ...st.config, ...cfg };
        delete next.durable; // `durability` is given; `durable` is only its alias
        const changed = Object.keys(cfg).filter((k) => JSON.stringify(cfg[k]) !== JSON.stringify(st.config[k]));
        await api("PUT", `/v0/topics/${enc(name)}`, next);
        say(out, changed.length ? `altered ${name}: ${changed.map((k) => `${k} ${JSON.stringify(st.config[k])} → ${JSON.stringify(cfg[k])}`).join(", ")}` : `${name}: nothing changed`);
        resetTopicForm();
      } else {
        let exists = false;
        try {
          await api("GET", `/v0/topics/${enc(name)}?touch=false`);
          exists = true;
        } catch (e) {
          if (!(e instanceof ApiError) || (e.status !== 404 && e.status !== 403)) throw e;
        }
        if (exists) {
          say(out, `topic ${name} already exists: use its "edit" button to alter it`, "error");
          return;
        }
        const r = await api("PUT", `/v0/topics/${enc(name)}`, cfg);
        say(out, r.created ? `created ${name}` : `${name} existed; its config was replaced`);
        resetTopicForm();
      }
      refreshTopics();
    } catch (e) {
      say(out, errText(e), "error");
    }
  }

  async function deleteTopic(name) {
    const out = $("#topics-msg");
    if (!confirm(`Delete topic "${name}" with all its records and routers? This cannot be undone.`)) return;
    try {
      const r = await api("DELETE", `/v0/topics/${enc(name)}`);
      const routers = r.routers_removed.length ? ` (routers removed: ${r.routers_removed.join(", ")})` : "";
      say(out, r.deleted ? `deleted ${name}${routers}` : `${name} did not exist`);
      prevHeads.delete(name);
      refreshTopics();
    } catch (e) {
      say(out, errText(e), "error");
    }
  }

  views.topics = () => {
    refreshTopics();
    every(() => {
      if ($("#topics-auto").checked) refreshTopics();
    });
  };

  // ------------------------------------------------------------------ message browser

  const browse = { topic: "", from: 0, state: null, highlight: null, records: [] };

  function pageSize() {
    return Number($("#browse-size").value);
  }

  async function loadPage(from, highlight) {
    const msg = $("#browse-msg");
    const topic = browse.topic;
    if (!topic) return;
    try {
      const r = await api("POST", `/v0/topics/${enc(topic)}/diff`, {
        from_seq: Math.max(0, from),
        limit: pageSize(),
        include_tags: true,
        include_meta: $("#browse-meta").checked,
      });
      browse.from = Math.max(0, from);
      browse.state = r;
      browse.records = r.records;
      browse.highlight = highlight || null;
      say(msg, r.tombstone ? tombstoneWords(r.tombstone) : "", r.tombstone ? "warn" : "ok");
      renderRecords();
      if (highlight) {
        const el = document.querySelector(`#browse-records [data-seq="${highlight}"]`);
        if (el) el.scrollIntoView({ block: "nearest" });
      }
    } catch (e) {
      say(msg, errText(e), "error");
    }
  }

  function tagMatcher(text) {
    if (!text) return () => true;
    if (!text.includes("*")) return (tag) => typeof tag === "string" && tag.includes(text);
    const re = new RegExp(`^${text.split("*").map((p) => p.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`);
    return (tag) => typeof tag === "string" && re.test(tag);
  }

  function recordView(rec, hit) {
    const head = h(
      "div",
      { class: "rec-head" },
      h("span", { class: "seq" }, `#${rec.$seq}`),
      h("span", { class: "ts" }, fmtTs(rec.$ts)),
      rec.$node !== undefined ? h("span", { class: "node" }, `node ${rec.$node}`) : null,
      rec.$tag !== undefined ? h("span", { class: "tag" }, `tag ${rec.$tag}`) : null,
    );
    return h(
      "div",
      { class: hit ? "rec hit" : "rec", "data-seq": rec.$seq },
      head,
      h("pre", { class: "data" }, JSON.stringify(rec.data, null, 2)),
      rec.meta !== undefined ? h("pre", { class: "meta" }, `meta ${JSON.stringify(rec.meta, null, 2)}`) : null,
    );
  }

  function renderRecords() {
    const r = browse.state;
    const match = tagMatcher($("#browse-tag").value.trim());
    const shown = browse.records.filter((rec) => match(rec.$tag));
    $("#browse-records").replaceChildren(...shown.map((rec) => recordView(rec, rec.$seq === browse.highlight)));
    const first = browse.records.length ? browse.records[0].$seq : null;
    const last = browse.records.length ? browse.records[browse.records.length - 1].$seq : null;
    const range = first === null ? "no records after this point" : `seqs ${first}–${last}`;
    const filtered = shown.length !== browse.records.length ? ` (${shown.length} of ${browse.records.length} match the tag filter)` : "";
    $("#browse-info").textContent = `${browse.topic}: ${range}${filtered} · live seqs ${r.earliest_seq}–${r.head_seq} · ${r.caught_up ? "at the head" : `${fmtInt(r.lag)} newer`}`;
    $("#browse-next").disabled = r.caught_up;
    $("#browse-prev").disabled = browse.from < r.earliest_seq;
  }

  async function jumpToTime() {
    const msg = $("#browse-msg");
    const value = $("#browse-time").value;
    if (!browse.topic || !value) return;
    const target = Date.parse(`${value}Z`);
    try {
      const seq = await firstAtOrAfter(browse.topic, target);
      if (seq === null) {
        say(msg, `no record at or after ${fmtTs(target)}`, "warn");
        return;
      }
      await loadPage(seq - 1, seq);
    } catch (e) {
      say(msg, errText(e), "error");
    }
  }

  /** Binary search over seqs for the first live record with `$ts >= target` ($ts grows with seq). */
  async function firstAtOrAfter(topic, target) {
    const probe = async (seq) => {
      const r = await api("POST", `/v0/topics/${enc(topic)}/diff`, { from_seq: seq - 1, limit: 1, include_meta: false });
      return r.records.length ? r.records[0] : null;
    };
    const st = await api("GET", `/v0/topics/${enc(topic)}?touch=false`);
    let lo = st.earliest_seq;
    let hi = st.head_seq;
    let found = null;
    while (lo <= hi) {
      const mid = Math.floor((lo + hi) / 2);
      const rec = await probe(mid);
      if (rec === null) hi = mid - 1;
      else if (rec.$ts >= target) {
        found = rec.$seq;
        hi = mid - 1;
      } else lo = rec.$seq + 1;
    }
    return found;
  }

  function initBrowse() {
    $("#browse-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      location.hash = `#/browse/${enc($("#browse-topic").value.trim())}`;
      if (browse.topic === $("#browse-topic").value.trim()) loadPage(browse.from);
    });
    $("#browse-first").addEventListener("click", () => loadPage(0));
    $("#browse-next").addEventListener("click", () => {
      if (browse.state) loadPage(browse.state.next_from_seq);
    });
    $("#browse-prev").addEventListener("click", () => {
      if (!browse.state) return;
      const floor = Math.max(0, browse.state.earliest_seq - 1);
      loadPage(Math.max(floor, browse.from - pageSize()));
    });
    $("#browse-last").addEventListener("click", async () => {
      if (!browse.topic) return;
      try {
        const st = await api("GET", `/v0/topics/${enc(browse.topic)}?touch=false`);
        loadPage(Math.max(st.earliest_seq - 1, st.head_seq - pageSize()));
      } catch (e) {
        say($("#browse-msg"), errText(e), "error");
      }
    });
    $("#browse-seq-go").addEventListener("click", () => {
      const seq = Number($("#browse-seq").value);
      if (seq >= 1) loadPage(seq - 1, seq);
    });
    $("#browse-time-go").addEventListener("click", jumpToTime);
    $("#browse-tag").addEventListener("input", () => {
      if (browse.state) renderRecords();
    });
    $("#browse-meta").addEventListener("change", () => loadPage(browse.from));
    $("#browse-size").addEventListener("change", () => loadPage(browse.from));
  }

  views.browse = (topic) => {
    if (!topic) topic = browse.topic;
    $("#browse-topic").value = topic;
    if (topic && (topic !== browse.topic || !browse.state)) {
      const from = topic === browse.topic ? browse.from : 0;
      browse.topic = topic;
      loadPage(from);
    } else if (!topic) {
      $("#browse-info").textContent = "Choose a topic.";
    }
  };

  // ------------------------------------------------------------------ live tail

  const tail = { es: null, topics: [] };

  function tailState(text) {
    $("#tail-state").textContent = text;
  }

  function tailLine(kind, topic, parts) {
    const log = $("#tail-log");
    log.prepend(h("li", { class: `tail-${kind}`, "data-kind": kind, "data-topic": topic }, parts));
    while (log.childElementCount > TAIL_MAX) log.lastElementChild.remove();
  }

  function onTailRecord(ev) {
    const d = JSON.parse(ev.data);
    for (const rec of d.records) {
      const body = JSON.stringify(rec.data);
      tailLine("record", d.topic, [
        h("span", { class: "topic" }, d.topic),
        h("span", { class: "seq", "data-seq": rec.$seq }, `#${rec.$seq}`),
        h("span", { class: "ts" }, fmtTs(rec.$ts)),
        rec.$node !== undefined ? h("span", { class: "node" }, rec.$node) : null,
        rec.$tag !== undefined ? h("span", { class: "tag" }, rec.$tag) : null,
        h("code", { class: "data" }, body.length > 2000 ? `${body.slice(0, 2000)}…` : body),
      ]);
    }
  }

  function stopTail(text) {
    if (tail.es) tail.es.close();
    tail.es = null;
    tailState(text || "stopped");
  }

  async function startTail(ev) {
    ev.preventDefault();
    stopTail("connecting…");
    const msg = $("#tail-msg");
    const topics = $("#tail-topics").value.split(",").map((s) => s.trim()).filter(Boolean);
    const fromBeginning = $("#tail-from").value === "begin";
    const spec = {};
    for (const t of topics) spec[t] = fromBeginning ? { from_seq: 0 } : { tail: true };
    let session;
    try {
      session = await api("POST", "/v0/watch", { topics: spec, include_tags: true, include_meta: false });
    } catch (e) {
      say(msg, errText(e), "error");
      tailState("stopped");
      return;
    }
    say(msg, "");
    tail.topics = topics;
    // An EventSource cannot send headers: the key goes in `?token=` (API §1.2).
    const key = apiKey();
    const url = session.stream_url + (key ? `?token=${enc(key)}` : "");
    const es = new EventSource(url);
    tail.es = es;
    es.addEventListener("open", () => tailState(`live: ${topics.join(", ")}`));
    es.addEventListener("record", onTailRecord);
    es.addEventListener("tombstone", (e) => {
      const d = JSON.parse(e.data);
      tailLine("tombstone", d.topic, [h("span", { class: "topic" }, d.topic), `⚠ ${tombstoneWords(d)}`]);
    });
    es.addEventListener("caught-up", (e) => {
      const d = JSON.parse(e.data);
      tailState(`live: ${topics.join(", ")} · ${d.topic} caught up at ${d.head_seq}`);
    });
    es.addEventListener("topic-deleted", (e) => {
      const d = JSON.parse(e.data);
      tailLine("deleted", d.topic, [h("span", { class: "topic" }, d.topic), "the topic was deleted: nothing more will come from it"]);
    });
    es.addEventListener("error", (e) => {
      if (tail.es !== es) return;
      if (e instanceof MessageEvent) {
        tailLine("error", "", ["the server is shutting down; the console will reconnect"]);
      } else if (es.readyState === EventSource.CLOSED) {
        stopTail("closed: the session is gone or the key was refused; press Start again");
      } else {
        tailState("reconnecting…");
      }
    });
  }

  function initTail() {
    $("#tail-form").addEventListener("submit", startTail);
    $("#tail-stop").addEventListener("click", () => stopTail());
    $("#tail-clear").addEventListener("click", () => $("#tail-log").replaceChildren());
  }

  views.tail = (topic) => {
    if (topic && !tail.es) $("#tail-topics").value = topic;
  };

  // ------------------------------------------------------------------ server

  const SVG = "http://www.w3.org/2000/svg";
  const series = new Map(); // name -> [values]
  let prevMetrics = null;

  const CHARTS = [
    ["records_live", "Live records", fmtInt],
    ["bytes_live", "Live bytes", fmtBytes],
    ["wal_frames_rate", "WAL frames/s", fmtRate],
    ["wal_bytes_rate", "WAL bytes/s", (v) => `${fmtBytes(Math.round(v))}/s`],
    ["fsync_rate", "fsyncs/s", fmtRate],
    ["fsync_mean_us", "Mean fsync µs", (v) => (v === null ? "—" : v.toFixed(0))],
    ["sse_connections", "Stream connections", fmtInt],
    ["queue_leases_in_flight", "Leases in flight", fmtInt],
    ["wal_queue_depth", "WAL queue depth", fmtInt],
  ];

  function samples(m) {
    const out = {
      records_live: m.records_live,
      bytes_live: m.bytes_live,
      sse_connections: m.sse_connections,
      queue_leases_in_flight: m.queue_leases_in_flight,
      wal_queue_depth: m.wal.queue_depth,
    };
    const now = performance.now();
    if (prevMetrics) {
      const dt = (now - prevMetrics.at) / 1000;
      const w0 = prevMetrics.m.wal;
      const w1 = m.wal;
      out.wal_frames_rate = Math.max(0, w1.frames - w0.frames) / dt;
      out.wal_bytes_rate = Math.max(0, w1.bytes_written - w0.bytes_written) / dt;
      out.fsync_rate = Math.max(0, w1.fsync_count - w0.fsync_count) / dt;
      const n = w1.fsync_count - w0.fsync_count;
      out.fsync_mean_us = n > 0 ? (w1.fsync_micros_total - w0.fsync_micros_total) / n : 0;
    }
    prevMetrics = { m, at: now };
    return out;
  }

  function svgEl(tag, attrs) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    return el;
  }

  /** A line over the last CHART_POINTS samples (newest on the right), scaled to its max. */
  function sparkline(values, fmt) {
    const w = 240;
    const hgt = 48;
    const svg = svgEl("svg", { viewBox: `0 0 ${w} ${hgt}`, width: w, height: hgt, role: "img" });
    svg.append(svgEl("rect", { x: 0, y: 0, width: w, height: hgt, class: "chart-bg" }));
    svg.append(svgEl("line", { x1: 0, y1: hgt - 0.5, x2: w, y2: hgt - 0.5, class: "chart-axis" }));
    if (values.length) {
      const top = svgEl("text", { x: 3, y: 10, class: "chart-max" });
      top.textContent = `max ${fmt(Math.max(...values))}`;
      svg.append(top);
    }
    if (values.length > 1) {
      const max = Math.max(...values, 1e-9);
      const min = Math.min(...values, 0);
      const step = w / (CHART_POINTS - 1);
      const x0 = w - step * (values.length - 1);
      const pts = values.map((v, i) => `${(x0 + i * step).toFixed(1)},${(hgt - 3 - ((v - min) / (max - min || 1)) * (hgt - 6)).toFixed(1)}`);
      svg.append(svgEl("polyline", { points: pts.join(" "), fill: "none", class: "spark" }));
    }
    return svg;
  }

  function renderCharts(sample) {
    const box = $("#charts");
    const cards = [];
    for (const [name, label, fmt] of CHARTS) {
      const v = sample[name];
      if (v !== undefined) {
        const s = series.get(name) || [];
        s.push(v);
        while (s.length > CHART_POINTS) s.shift();
        series.set(name, s);
      }
      const s = series.get(name) || [];
      const last = s.length ? fmt(s[s.length - 1]) : "—";
      cards.push(h("div", { class: "card chart", "data-metric": name }, h("h3", {}, label), h("div", { class: "value" }, last), sparkline(s, fmt)));
    }
    box.replaceChildren(...cards);
  }

  function kv(pairs) {
    return h("dl", {}, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  }

  async function refreshServer() {
    const msg = $("#server-msg");
    const errors = [];
    try {
      const hl = await api("GET", "/v0/health");
      $("#card-health .body").replaceChildren(kv([["status", hl.status], ["version", hl.version], ["uptime", fmtDuration(hl.uptime_ms)]]));
    } catch (e) {
      $("#card-health .body").replaceChildren(h("p", { class: "bad" }, errText(e)));
    }
    try {
      const rd = await api("GET", "/v0/ready");
      $("#card-ready .body").replaceChildren(kv([["status", rd.status], ["topics", fmtInt(rd.topics)]]));
      setDot(true);
    } catch (e) {
      const progress = e.detail && e.detail.replay_progress !== undefined ? ` (replay ${(e.detail.replay_progress * 100).toFixed(0)} %)` : "";
      $("#card-ready .body").replaceChildren(h("p", { class: "bad" }, errText(e) + progress));
      setDot(false);
    }
    try {
      const m = await api("GET", "/v0/metrics");
      $("#card-totals .body").replaceChildren(
        kv([
          ["topics", `${fmtInt(m.topics)} (disk ${m.topics_disk}, fsync ${m.topics_fsync}, memory ${m.topics_memory}, ephemeral ${m.topics_ephemeral})`],
          ["queue topics", fmtInt(m.queue_topics)],
          ["routers", fmtInt(m.routers)],
          ["watch sessions", fmtInt(m.watch_sessions)],
          ["WAL", m.wal.read_only ? "READ-ONLY" : "writable"],
        ]),
      );
      renderCharts(samples(m));
    } catch (e) {
      errors.push(`metrics: ${errText(e)}`);
    }
    say(msg, errors.join("; "), errors.length ? "error" : "ok");
  }

  function setDot(ok) {
    const dot = $("#server-dot");
    dot.className = ok ? "dot up" : "dot down";
    dot.title = ok ? "server ready" : "server not ready or unreachable";
  }

  views.server = () => {
    refreshServer();
    every(refreshServer);
  };

  // ------------------------------------------------------------------ start

  function start() {
    initKey();
    $("#topics-refresh").addEventListener("click", refreshTopics);
    $("#topics-prefix").addEventListener("change", refreshTopics);
    $("#topic-form").addEventListener("submit", submitTopic);
    $("#topic-cancel").addEventListener("click", () => {
      resetTopicForm();
      say($("#topic-form-msg"), "");
    });
    initBrowse();
    initTail();
    window.addEventListener("hashchange", route);
    api("GET", "/v0/ready").then(() => setDot(true), () => setDot(false));
    route();
    document.body.dataset.ready = "1";
  }

  start();
})();
