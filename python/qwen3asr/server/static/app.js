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

// Word times: the words of each finished segment, as buttons that play their stretch of audio
// (the microphone's 16 kHz samples the page sent, or the uploaded file).
let player = null;  // one AudioContext for playing words back

function playSamples(samples, start, end, el) {
  // samples: Int16Array chunks at RATE Hz, in order
  const a = Math.max(0, Math.floor(start * RATE)), b = Math.max(a + 1, Math.ceil(end * RATE));
  const out = new Float32Array(b - a);
  let pos = 0;
  for (const chunk of samples) {
    const lo = Math.max(a, pos), hi = Math.min(b, pos + chunk.length);
    for (let i = lo; i < hi; i++) out[i - a] = chunk[i - pos] / 32768;
    pos += chunk.length;
    if (pos >= b) break;
  }
  if (!player || player.state === "closed") player = new AudioContext();
  const buf = player.createBuffer(1, out.length, RATE);
  buf.copyToChannel(out, 0);
  const src = player.createBufferSource();
  src.buffer = buf;
  src.connect(player.destination);
  markPlaying(el, start, end);
  src.onended = () => el.classList.remove("playing");
  src.start();
}

function markPlaying(el, start, end) {
  el.classList.add("playing");
  el.parentElement.dataset.played = `${start}-${end}`;  // the last word played (tests read it)
}

function showWords(box, words, play) {
  for (const w of words) {
    const el = document.createElement("span");
    el.className = "word";
    el.textContent = w.word;
    el.dataset.start = w.start;
    el.dataset.end = w.end;
    el.title = `${w.start.toFixed(2)}-${w.end.toFixed(2)} s`;
    el.addEventListener("click", () => play(w.start, w.end, el));
    box.appendChild(el);
  }
}

async function startLive() {
  $("start").disabled = true;
  $("committed").textContent = "";
  $("tail").textContent = "";
  $("words").textContent = "";
  const state = { ws: null, ctx: null, media: null, node: null, ready: false, pending: [], stopped: false,
                  sent: [], final: "", streamed: "" };
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
    state.sent.push(new Int16Array(e.data));  // kept to play words back
    if (state.ready && ws.readyState === WebSocket.OPEN) ws.send(e.data);
    else state.pending.push(e.data);
  };
  ws.onopen = () => {
    const lang = $("language").value || null;
    ws.send(JSON.stringify({ type: "start", sample_rate: RATE, format: "s16le", language: lang,
                             chunk_size: parseFloat($("chunk-size").value) || 2.0, vad: $("vad").checked,
                             words: $("words-live").checked }));
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
      state.streamed += m.text;  // streamed text of the piece of speech still going on
      $("committed").textContent = joinText(state.final, state.streamed);
    } else if (m.type === "tail") {
      $("tail").textContent = m.text;
    } else if (m.type === "segment") {
      // a finished piece: its final text replaces the streamed pieces sent for it
      state.final = joinText(state.final, m.text);
      state.streamed = "";
      $("committed").textContent = state.final;
      if (m.words) showWords($("words"), m.words, (s, e, el) => playSamples(state.sent, s, e, el));
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
  // Committed pieces carry their own spacing; finished segments are joined with a space between
  // two word characters (none next to CJK). The server's final text is authoritative.
  if (!a || !b || /\s$/.test(a) || /^\s/.test(b)) return a + b;
  const word = /[\p{L}\p{N}']/u, cjk = /[\u3000-\u9fff\uac00-\ud7af\uf900-\ufaff]/u;
  const x = a[a.length - 1], y = b[0];
  return word.test(x) && word.test(y) && !cjk.test(x) && !cjk.test(y) ? a + " " + b : a + b;
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
  const words = $("words-file").checked;
  form.append("response_format", words ? "verbose_json" : $("response-format").value);
  if (words) form.append("timestamp_granularities[]", "word");
  $("file-words").textContent = "";
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
      if (type.includes("json")) {
        const body = await r.json();
        out.textContent = JSON.stringify(body, null, 2);
        if (body.words) {
          const samples = await fileSamples(file);
          showWords($("file-words"), body.words, (s, e, el) => playSamples(samples, s, e, el));
        }
      } else {
        out.textContent = await r.text();
      }
    }
  } catch (e) {
    out.textContent = "error: " + e;
  } finally {
    $("submit").disabled = false;
  }
}

async function fileSamples(file) {
  // the uploaded file decoded and resampled to RATE mono by the browser, as Int16 chunks
  const ctx = new OfflineAudioContext(1, 1, RATE);
  const decoded = await ctx.decodeAudioData(await file.arrayBuffer());
  const off = new OfflineAudioContext(1, Math.ceil(decoded.duration * RATE), RATE);
  const src = off.createBufferSource();
  src.buffer = decoded;
  src.connect(off.destination);
  src.start();
  const mono = (await off.startRendering()).getChannelData(0);
  return [Int16Array.from(mono, (v) => Math.max(-32768, Math.min(32767, Math.round(v * 32768))))];
}

$("start").addEventListener("click", startLive);
$("stop").addEventListener("click", stopLive);
$("file-form").addEventListener("submit", transcribeFile);
