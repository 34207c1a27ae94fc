// The view of docs/images/timeline-sqlite.png, run in Perfetto UI by
// crates/fctrace/tests/perfetto/ui.mjs --view (`app` is window.app, `sql`
// runs a query on the UI's engine): the first `exec` of
// sqlite_driver.c (CREATE TABLE city ...) fills the width, every track
// is expanded, the sidebar hidden, and the statement's longest
// sqlite3_step selected, so that the details panel shows a slice.
const t = app.trace;
const [exec] = await sql(
  "select id, ts, dur from slice where name = 'exec' and depth = 1 order by ts limit 1");
const margin = exec.dur / 50n;
t.timeline.setViewportTime(exec.ts - margin, exec.ts + exec.dur + margin);
for (const node of t.workspace.flatTracks) node.expand();
if (app.sidebar.visible) app.sidebar.toggleVisibility();
const [step] = await sql(
  `select id from descendant_slice(${exec.id}) where name = 'sqlite3_step' order by dur desc limit 1`);
t.selection.selectSqlEvent('slice', Number(step.id));
