// AudioWorklet: microphone samples (the context's rate) -> 16-bit PCM at the stream's rate.
// Windowed-sinc resampling (a low-pass at the lower Nyquist rate, Blackman window), so
// downsampling 48 kHz -> 16 kHz does not alias. Posts an Int16Array about every 100 ms.
class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.outRate = options.processorOptions.targetRate;
    this.step = sampleRate / this.outRate;            // input samples per output sample
    this.cut = Math.min(1, this.outRate / sampleRate) * 0.95;  // cutoff, cycles per input sample x2
    this.half = Math.ceil(8 / this.cut);              // taps each side
    this.buf = new Float32Array(0);                   // kept input
    this.pos = 0;                                      // next output time, in buf samples
    this.out = [];
    this.frame = Math.round(this.outRate / 10);        // 100 ms
    this.port.onmessage = (e) => { if (e.data === "flush") this.flush(); };
  }
  kernel(u) {
    if (u === 0) return this.cut;
    const x = Math.PI * this.cut * u;
    const w = 0.42 + 0.5 * Math.cos(Math.PI * u / this.half) + 0.08 * Math.cos(2 * Math.PI * u / this.half);
    return this.cut * Math.sin(x) / x * w;
  }
  push(input) {
    const b = new Float32Array(this.buf.length + input.length);
    b.set(this.buf); b.set(input, this.buf.length);
    this.buf = b;
    while (this.pos + this.half < this.buf.length) {
      const c = Math.floor(this.pos);
      let acc = 0;
      for (let n = c - this.half + 1; n <= c + this.half; n++) {
        if (n >= 0) acc += this.buf[n] * this.kernel(this.pos - n);
      }
      this.out.push(acc);
      this.pos += this.step;
    }
    const drop = Math.max(0, Math.floor(this.pos) - this.half);
    if (drop > 0) { this.buf = this.buf.slice(drop); this.pos -= drop; }
    if (this.out.length >= this.frame) this.flush();
  }
  flush() {
    if (!this.out.length) return;
    const pcm = new Int16Array(this.out.length);
    for (let i = 0; i < this.out.length; i++) {
      const s = Math.max(-1, Math.min(1, this.out[i]));
      pcm[i] = s < 0 ? s * 32768 : s * 32767;
    }
    this.out = [];
    this.port.postMessage(pcm, [pcm.buffer]);
  }
  process(inputs) {
    const ch = inputs[0];
    if (ch && ch.length) {
      if (ch.length === 1) this.push(ch[0]);
      else {  // mix down
        const m = new Float32Array(ch[0].length);
        for (const c of ch) for (let i = 0; i < m.length; i++) m[i] += c[i] / ch.length;
        this.push(m);
      }
    }
    return true;
  }
}
registerProcessor("capture-processor", CaptureProcessor);
