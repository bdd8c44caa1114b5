// Live captions (microphone -> AudioWorklet -> WebSocket /v1/stream) and file transcription.
"use strict";
const RATE = 16000;  // the stream's sample rate (the worklet resamples to it)
const $ = (id) => document.getElementById(id);
let live = null;

function setStatus(text, error) {
  $("status").textContent = text;
  $("status").className = error ? "status error" : "status";
}

function apiKey() { return $("api-key").value.trim(); }

async function startLive() {
  $("start").disabled = true;
  $("committed").textContent = "";
  $("tail").textContent = "";
  const state = { ws: null, ctx: null, media: null, node: null, ready: false, pending: [], stopped: false };
  live = state;
  try {
    state.media = await navigator.mediaDevices.getUserMedia(
      { audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false } });
    state.ctx = new AudioContext();
    await state.ctx.audioWorklet.addModule("/static/capture-worklet.js");
    const source = state.ctx.createMediaStreamSource(state.media);
    state.node = new AudioWorkletNode(state.ctx, "capture-processor",
                                      { processorOptions: { targetRate: RATE } });
    const mute = state.ctx.createGain();
    mute.gain.value = 0;
    source.connect(state.node).connect(mute).connect(state.ctx.destination);
  } catch (e) {
    setStatus("microphone unavailable: " + e, true);
    $("start").disabled = false;
    return;
  }
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const key = apiKey();
  const url = `${proto}//${location.host}/v1/stream` + (key ? `?api_key=${encodeURIComponent(key)}` : "");
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  state.node.port.onmessage = (e) => {
    if (state.stopped) return;
    if (state.ready && ws.readyState === WebSocket.OPEN) ws.send(e.data);
    else state.pending.push(e.data);
  };
  ws.onopen = () => {
    const lang = $("language").value || null;
    ws.send(JSON.stringify({ type: "start", sample_rate: RATE, format: "s16le", language: lang,
                             chunk_size: parseFloat($("chunk-size").value) || 2.0, vad: $("vad").checked }));
    setStatus("connecting");
  };
  ws.onmessage = (e) => {
    const m = JSON.parse(e.data);
    if (m.type === "ready") {
      state.ready = true;
      for (const p of state.pending) ws.send(p);
      state.pending = [];
      setStatus("listening");
      $("stop").disabled = false;
    } else if (m.type === "committed") {
      const c = $("committed").textContent;
      $("committed").textContent = joinText(c, m.text);
    } else if (m.type === "tail") {
      $("tail").textContent = m.text;
    } else if (m.type === "final") {
      $("committed").textContent = m.text;
      $("tail").textContent = "";
      setStatus("done");
    } else if (m.type === "error") {
      setStatus(`error (${m.code}): ${m.message}`, true);
    }
  };
  ws.onclose = (e) => {
    releaseAudio(state);
    $("start").disabled = false;
    $("stop").disabled = true;
    if ($("status").textContent !== "done" && !$("status").classList.contains("error"))
      setStatus(`closed (${e.code}${e.reason ? ": " + e.reason : ""})`, e.code !== 1000);
  };
}

function joinText(a, b) {
  // Committed pieces carry their own spacing; the server's final text is authoritative.
  return a + b;
}

function releaseAudio(state) {
  if (state.media) state.media.getTracks().forEach((t) => t.stop());
  if (state.ctx && state.ctx.state !== "closed") state.ctx.close();
}

function stopLive() {
  const state = live;
  if (!state) return;
  $("stop").disabled = true;
  state.node.port.postMessage("flush");
  setStatus("finishing");
  // Let the worklet post its last samples, then stop.
  setTimeout(() => {
    state.stopped = true;
    if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify({ type: "stop" }));
    releaseAudio(state);
  }, 150);
}

async function transcribeFile(ev) {
  ev.preventDefault();
  const out = $("file-result");
  const file = $("file").files[0];
  if (!file) return;
  const form = new FormData();
  form.append("file", file);
  form.append("response_format", $("response-format").value);
  const stream = $("stream").checked;
  if (stream) form.append("stream", "true");
  const lang = $("language").value;
  if (lang) form.append("language", lang);
  const headers = {};
  if (apiKey()) headers["Authorization"] = "Bearer " + apiKey();
  out.textContent = "transcribing...";
  $("submit").disabled = true;
  try {
    const r = await fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers });
    if (!r.ok) {
      const body = await r.json().catch(() => ({}));
      out.textContent = `error ${r.status}: ` + (body.error ? body.error.message : r.statusText);
    } else if (stream) {
      out.textContent = "";
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const line = buf.slice(0, i).replace(/^data: /, "");
          buf = buf.slice(i + 2);
          if (line === "[DONE]") continue;
          const ev = JSON.parse(line);
          if (ev.type === "transcript.text.delta") out.textContent += ev.delta;
          else if (ev.type === "transcript.text.done") out.textContent = ev.text;
          else if (ev.type === "error") out.textContent = "error: " + ev.error.message;
        }
      }
    } else {
      const type = r.headers.get("content-type") || "";
      out.textContent = type.includes("json") ? JSON.stringify(await r.json(), null, 2) : await r.text();
    }
  } catch (e) {
    out.textContent = "error: " + e;
  } finally {
    $("submit").disabled = false;
  }
}

$("start").addEventListener("click", startLive);
$("stop").addEventListener("click", stopLive);
$("file-form").addEventListener("submit", transcribeFile);
