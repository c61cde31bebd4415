#!/usr/bin/env node
// Runs an exported model (pstrain export --format=onnx) with ONNX Runtime
// on an MNIST-format test set and prints one JSON line:
//   {"correct": 9593, "count": 10000, "mean_loss": 0.12721, "runtime": "onnxruntime-node 1.30.0"}
// The input is what the model's metadata says: pixels / 255, [N, 1, 28, 28].
//
// Usage: node tools/onnx/evaluate_onnx.js MODEL.onnx DATA_DIR
// ONNX Runtime comes from tools/fetch_onnxruntime.sh (npm's
// onnxruntime-node, CPU only), found through NODE_PATH or that script's
// default directory.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

function loadOrt() {
  const fallback = path.join(__dirname, '..', '..', 'third_party', 'onnxruntime', 'node_modules',
                             'onnxruntime-node');
  try {
    return require('onnxruntime-node');
  } catch (e) {
    try {
      return require(fallback);
    } catch (e2) {
      console.error('evaluate_onnx: onnxruntime-node not found: run tools/fetch_onnxruntime.sh');
      process.exit(2);
    }
  }
}

function readIdx(dir, base) {
  for (const name of [base, base + '.gz']) {
    const p = path.join(dir, name);
    if (!fs.existsSync(p)) continue;
    let bytes = fs.readFileSync(p);
    if (bytes[0] === 0x1f && bytes[1] === 0x8b) bytes = zlib.gunzipSync(bytes);
    return bytes;
  }
  console.error(`evaluate_onnx: ${path.join(dir, base)} not found`);
  process.exit(2);
}

async function main() {
  const [modelPath, dataDir] = process.argv.slice(2);
  if (!modelPath || !dataDir) {
    console.error('usage: evaluate_onnx.js MODEL.onnx DATA_DIR');
    process.exit(2);
  }
  const ort = loadOrt();
  const images = readIdx(dataDir, 't10k-images-idx3-ubyte');
  const labels = readIdx(dataDir, 't10k-labels-idx1-ubyte');
  if (images.readUInt32BE(0) !== 0x803 || labels.readUInt32BE(0) !== 0x801) {
    console.error('evaluate_onnx: not IDX image and label files');
    process.exit(2);
  }
  const n = images.readUInt32BE(4), rows = images.readUInt32BE(8), cols = images.readUInt32BE(12);
  if (labels.readUInt32BE(4) !== n || images.length !== 16 + n * rows * cols) {
    console.error('evaluate_onnx: image and label files disagree');
    process.exit(2);
  }
  // p / 255 in float32, as PyTorch's ToTensor and pstrain's GatherBatch.
  const table = new Float32Array(256);
  for (let p = 0; p < 256; ++p) table[p] = Math.fround(p / 255);
  const session = await ort.InferenceSession.create(modelPath, {intraOpNumThreads: 1});
  const batch = 500, size = rows * cols;
  let correct = 0, lossSum = 0, classes = 0;
  for (let begin = 0; begin < n; begin += batch) {
    const m = Math.min(batch, n - begin);
    const x = new Float32Array(m * size);
    for (let i = 0; i < m * size; ++i) x[i] = table[images[16 + begin * size + i]];
    const out = await session.run({image: new ort.Tensor('float32', x, [m, 1, rows, cols])});
    const logp = out.log_probs;
    classes = logp.dims[1];
    for (let b = 0; b < m; ++b) {
      let best = 0;
      for (let c = 1; c < classes; ++c) {
        if (logp.data[b * classes + c] > logp.data[b * classes + best]) best = c;
      }
      const label = labels[8 + begin + b];
      if (best === label) ++correct;
      lossSum -= logp.data[b * classes + label];
    }
  }
  const version = ort.env && ort.env.versions ? ort.env.versions.common : 'unknown';
  console.log(JSON.stringify({correct, count: n, mean_loss: lossSum / n,
                              runtime: `onnxruntime-node ${version}`}));
}

main().catch((e) => {
  console.error(`evaluate_onnx: ${e.message}`);
  process.exit(1);
});
