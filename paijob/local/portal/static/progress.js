"use strict";
/* The training-progress chart: points parsed from a task's log, drawn on a <canvas> (no library). */

/**
 * One point from a log line, or null. The lines are the ones paijob's recipes print (their format
 * is written down in paijob/runtime/recipes/loglines.py), as they reach a task's log, where
 * paijob-runtime may prefix a worker's lines with "[rankN]: ":
 *   paijob: epoch 1/2 step 32/64 loss 1.9777 lr 0.02 940.5 img/s
 *   paijob: epoch 1/2 train loss 1.9728 top1 28.61% | eval loss 0.7215 top1 68.36% | 940.4 img/s
 * x counts epochs: step s of S in epoch e is at e - 1 + s / S, the end of epoch e at e.
 */
function parseProgressLine(line) {
  let m = /\bepoch (\d+)\/\d+ step (\d+)\/(\d+) loss (\S+) .*?(\S+) img\/s\s*$/.exec(line);
  if (m) {
    return { kind: "step", x: Number(m[1]) - 1 + Number(m[2]) / Math.max(Number(m[3]), 1),
             loss: Number(m[4]), rate: Number(m[5]) };
  }
  m = /\bepoch (\d+)\/\d+ train loss (\S+) .*\beval loss (\S+) .*\|\s*(\S+) img\/s\s*$/.exec(line);
  if (m) {
    return { kind: "epoch", x: Number(m[1]), loss: Number(m[2]), evalLoss: Number(m[3]), rate: Number(m[4]) };
  }
  return null;
}

/** The chart's data, fed with a log's text as it arrives (lines may be split across chunks). */
class Progress {
  constructor() {
    this.partial = "";
    this.steps = [];
    this.epochs = [];
  }

  add(text) {
    const lines = (this.partial + text).split("\n");
    this.partial = lines.pop();
    for (const line of lines) {
      const point = parseProgressLine(line);
      if (point) (point.kind === "step" ? this.steps : this.epochs).push(point);
    }
  }

  /** The series of the loss chart and of the speed chart. */
  series() {
    const xy = (points, key) => points.map((p) => ({ x: p.x, y: p[key] })).filter((p) => Number.isFinite(p.y));
    const perStep = this.steps.length > 0;
    return {
      loss: [
        { name: perStep ? "train loss (step)" : "train loss (epoch)", color: "#1f5f99", line: true,
          points: xy(perStep ? this.steps : this.epochs, "loss") },
        { name: "eval loss (epoch)", color: "#c2571a", line: false, points: xy(this.epochs, "evalLoss") },
      ],
      rate: [
        { name: perStep ? "images/s (step)" : "images/s (epoch)", color: "#2e7d32", line: true,
          points: xy(perStep ? this.steps : this.epochs, "rate") },
      ],
    };
  }
}

function niceNumber(value) {
  const abs = Math.abs(value);
  if (abs >= 1000) return value.toFixed(0);
  if (abs >= 10) return value.toFixed(1);
  return value.toPrecision(3);
}

function chartRange(values, fromZero) {
  let low = fromZero ? Math.min(0, ...values) : Math.min(...values);
  let high = Math.max(...values);
  if (high === low) {
    high += Math.abs(high) * 0.1 || 1;
    low -= fromZero ? 0 : Math.abs(low) * 0.1 || 1;
  }
  return [low, high];
}

/** Draw ``series`` on ``canvas``; the canvas's data-points says how many points it holds. */
function drawChart(canvas, series, title, ended = false) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 480;
  const height = canvas.clientHeight || 220;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = "12px system-ui, sans-serif";
  ctx.fillStyle = "#333";
  ctx.fillText(title, 8, 14);
  const points = series.flatMap((s) => s.points);
  canvas.dataset.points = String(points.length);
  if (!points.length) {
    ctx.fillStyle = "#888";
    const text = ended ? "no progress lines in this log" : "waiting for progress lines";
    ctx.fillText(text, (width - ctx.measureText(text).width) / 2, height / 2);
    return;
  }
  const left = 56, right = 12, top = 24, bottom = 26;
  const [x0, x1] = [0, Math.max(1, Math.ceil(Math.max(...points.map((p) => p.x))))];
  const [y0, y1] = chartRange(points.map((p) => p.y), title.startsWith("images"));
  const px = (x) => left + ((x - x0) / (x1 - x0)) * (width - left - right);
  const py = (y) => height - bottom - ((y - y0) / (y1 - y0)) * (height - top - bottom);
  ctx.strokeStyle = "#ccc";
  ctx.fillStyle = "#555";
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = y0 + ((y1 - y0) * i) / 4;
    ctx.beginPath();
    ctx.moveTo(left, py(y));
    ctx.lineTo(width - right, py(y));
    ctx.stroke();
    ctx.fillText(niceNumber(y), 4, py(y) + 4);
  }
  const every = Math.max(1, Math.ceil(x1 / 10));
  for (let epoch = 0; epoch <= x1; epoch += every) ctx.fillText(String(epoch), px(epoch) - 3, height - 8);
  ctx.fillText("epoch", 4, height - 8);
  let legendX = width - right;
  for (const s of [...series].reverse()) {
    if (!s.points.length) continue;
    legendX -= ctx.measureText(s.name).width + 22;
    ctx.fillStyle = s.color;
    ctx.fillRect(legendX, 6, 10, 10);
    ctx.fillStyle = "#333";
    ctx.fillText(s.name, legendX + 14, 15);
  }
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.fillStyle = s.color;
    ctx.lineWidth = 2;
    if (s.line && s.points.length > 1) {
      ctx.beginPath();
      s.points.forEach((p, i) => (i ? ctx.lineTo(px(p.x), py(p.y)) : ctx.moveTo(px(p.x), py(p.y))));
      ctx.stroke();
    }
    for (const p of s.points) {
      ctx.beginPath();
      ctx.arc(px(p.x), py(p.y), s.line ? 2 : 3.5, 0, 2 * Math.PI);
      ctx.fill();
    }
  }
}
