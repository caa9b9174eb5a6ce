"""The live dashboard served at ``GET /`` by every node: the cluster as that node sees it.

One static page, no build step and nothing fetched from elsewhere: it polls ``/v1/status``
(this node, and every member's summary as this node gathered it) each second and
``/v1/ring?points=1`` when the members change, and draws:

- the cluster's state in words ("crawling", "idle", "idle, but n2 is down and its queue
  waits", "paused"), and progress (URLs finished of those known);
- the ring as SVG, each member's arcs in its colour, a member that is down greyed;
- the members: state, age of the last heartbeat, arc share, windowed fetch rate (from two
  samples, not fetched ÷ uptime), queue depths, admission, outbox;
- this node's stages (depth, oldest age), admission with its reasons, and a chart of the
  cluster's fetch rate over the last minutes;
- the busiest hosts with limit, throttle point and backoff;
- the worst hosts by health (core.site_health): state, score and the reasons.

Data that could not be refreshed is shown as stale, with its age, in its own colour.
"""

DASHBOARD_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>crawler-node</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>
 body{font:14px system-ui,sans-serif;margin:1.5em 2em;color:#222;background:#fafafa}
 h1{margin:.2em 0} h2{font-size:1.05em;margin:1.2em 0 .3em}
 table{border-collapse:collapse;margin:.3em 0;background:#fff}
 td,th{padding:.2em .7em;border-bottom:1px solid #e3e3e3;text-align:right;white-space:nowrap}
 th:first-child,td:first-child{text-align:left}
 .state{padding:.1em .5em;border-radius:.3em;font-size:.8em;vertical-align:middle}
 .crawling{background:#fde6c4;color:#8a4b00} .idle{background:#d4f3df;color:#146c35}
 .waiting,.paused{background:#e4e4f7;color:#33338a} .down,.unreachable{background:#f7d4d4;color:#8a1414}
 .suspect{background:#fff1b8;color:#6b5400} .alive{background:#d4f3df;color:#146c35}
 #stale{display:none;background:#8a1414;color:#fff;padding:.3em .7em;border-radius:.3em;margin:.5em 0}
 .grid{display:flex;flex-wrap:wrap;gap:2em;align-items:flex-start} .muted{color:#888}
 progress{width:20em}
</style></head><body>
<h1>crawler-node <span id="node"></span> <span id="state" class="state"></span></h1>
<div id="stale" role="alert"></div>
<div><progress id="progress" max="1" value="0"></progress> <span id="progress-text"></span></div>
<div class="grid">
 <div><h2>Ring</h2><svg id="ring" width="220" height="220" viewBox="-110 -110 220 220"
   role="img" aria-label="hash ring"></svg><div id="legend"></div></div>
 <div><h2>Members</h2><table id="members"></table>
  <h2>Fetch rate (cluster, pages/s, last minutes)</h2>
  <svg id="chart" width="420" height="80" viewBox="0 0 420 80"></svg></div>
</div>
<div class="grid">
 <div><h2>This node's stages</h2><table id="queues"></table></div>
 <div><h2>Admission</h2><div id="admission"></div><div id="counters" class="muted"></div></div>
</div>
<h2>Busiest hosts</h2><table id="hosts"></table>
<h2>Worst hosts</h2><div id="health" class="muted"></div><table id="worst"></table>
<script>
"use strict";
const COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#17becf","#bcbd22"];
const HISTORY = 180;               // samples kept for the chart and the windowed rates (1 s apart)
const STALE_AFTER_MS = 2500;
let lastOk = 0, ringKey = "", ringPoints = [], colorOf = {}, samples = [];

function esc(v){return String(v ?? "").replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));}
function row(cells, tag){return "<tr>" + cells.map(c => `<${tag}>${c}</${tag}>`).join("") + "</tr>";}
function fmt(n, digits){return (n === null || n === undefined) ? "" : Number(n).toFixed(digits ?? 0);}
function badge(text, cls){return `<span class="state ${cls}">${esc(text)}</span>`;}

function clusterState(s){
  const down = s.members.filter(m => !m.self && !m.left && m.state !== "alive").map(m => m.id);
  if (s.admission && s.admission.blocked_by === "paused") return ["paused", "paused"];
  if (s.paused) return ["paused", "paused"];
  const nodeIdle = s.node_idle ?? s.idle;
  if (down.length && nodeIdle) {
    const who = down.join(", ");
    return [`idle, but ${who} ${down.length > 1 ? "are" : "is"} down and ${down.length > 1 ? "their queues wait" : "its queue waits"}`, "waiting"];
  }
  return s.idle ? ["idle", "idle"] : ["crawling", "crawling"];
}

function windowedRate(id, seconds){
  // pages/s of one member over the last `seconds`, from two samples of its fetched counter
  const now = samples[samples.length - 1];
  if (!now || now.fetched[id] === undefined) return null;
  let then = null;
  for (let i = samples.length - 1; i >= 0; i--) {
    if (now.t - samples[i].t >= seconds * 1000) { then = samples[i]; break; }
    then = samples[i];
  }
  if (!then || then === now || then.fetched[id] === undefined) return null;
  return (now.fetched[id] - then.fetched[id]) / ((now.t - then.t) / 1000);
}

function drawRing(members){
  const svg = document.getElementById("ring");
  const r = 90, parts = [`<circle r="${r}" fill="none" stroke="#eee" stroke-width="18"></circle>`];
  const state = Object.fromEntries(members.map(m => [m.id, m.state]));
  const n = ringPoints.length;
  for (let i = 0; i < n; i++) {
    // the arc from this point clockwise to the next belongs to the next point's owner
    const start = ringPoints[i][0], end = i + 1 < n ? ringPoints[i + 1][0] : ringPoints[0][0] + 4294967296;
    const owner = ringPoints[(i + 1) % n][1];
    const a0 = start / 4294967296 * 2 * Math.PI - Math.PI / 2, a1 = end / 4294967296 * 2 * Math.PI - Math.PI / 2;
    const large = (a1 - a0) > Math.PI ? 1 : 0;
    const color = state[owner] === "alive" ? (colorOf[owner] || "#999") : "#ccc";
    parts.push(`<path class="arc" data-member="${esc(owner)}" d="M ${r*Math.cos(a0)} ${r*Math.sin(a0)} ` +
               `A ${r} ${r} 0 ${large} 1 ${r*Math.cos(a1)} ${r*Math.sin(a1)}" stroke="${color}" ` +
               `stroke-width="18" fill="none"></path>`);
  }
  svg.innerHTML = parts.join("");
  document.getElementById("legend").innerHTML = members.map(m =>
    `<span style="color:${m.state === "alive" ? colorOf[m.id] : "#aaa"}">&#9632;</span> ${esc(m.id)} ` +
    `${fmt(100 * (m.arc_share || 0), 1)}%`).join(" &nbsp; ");
}

async function refreshRing(members){
  const key = members.map(m => m.id + ":" + m.state).join(",");
  members.forEach((m, i) => { colorOf[m.id] = colorOf[m.id] || COLORS[Object.keys(colorOf).length % COLORS.length]; });
  if (key !== ringKey) {
    try {
      const ring = await (await fetch("/v1/ring?points=1", {cache: "no-store"})).json();
      ringPoints = ring.points || []; ringKey = key;
    } catch (e) { /* drawn again on the next tick */ }
  }
  drawRing(members);
}

function drawChart(){
  const svg = document.getElementById("chart");
  const rates = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i], dt = (b.t - a.t) / 1000;
    let sum = 0;
    for (const id of Object.keys(b.fetched)) if (a.fetched[id] !== undefined) sum += Math.max(0, b.fetched[id] - a.fetched[id]);
    rates.push(dt > 0 ? sum / dt : 0);
  }
  const top = Math.max(1, ...rates);
  const pts = rates.map((v, i) => `${(i / (HISTORY - 1) * 420).toFixed(1)},${(78 - v / top * 72).toFixed(1)}`).join(" ");
  svg.innerHTML = `<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="${pts}"></polyline>` +
                  `<text x="2" y="10" font-size="10" fill="#888">${fmt(top, 1)}/s</text>`;
}

function render(s){
  document.getElementById("node").textContent = s.node_id;
  const [text, cls] = clusterState(s);
  const st = document.getElementById("state"); st.textContent = text; st.className = "state " + cls;
  const members = s.members.length ? s.members : [{id: s.node_id, self: true, state: "alive", arc_share: 1,
    heartbeat_age_s: 0, fetched: s.counters.fetched, reachable: true}];
  if (!s.members.length) members[0].queues = Object.fromEntries(Object.entries(s.queues).map(([k, q]) => [k, q.depth]));
  const fetched = {};
  members.forEach(m => { if (m.reachable !== false && m.fetched !== undefined) fetched[m.id] = m.fetched; });
  samples.push({t: Date.now(), fetched}); if (samples.length > HISTORY) samples.shift();
  let finished = 0, known = 0;
  members.forEach(m => { finished += m.finished || 0; known += m.known || 0; });
  if (!s.members.length) { finished = ["done","failed","dropped"].reduce((a, k) => a + (s.frontier[k] || 0), 0);
    known = ["queued","leased","done","failed","deferred","dropped"].reduce((a, k) => a + (s.frontier[k] || 0), 0); }
  const bar = document.getElementById("progress"); bar.max = Math.max(1, known); bar.value = finished;
  document.getElementById("progress-text").textContent = `${finished} of ${known} known URLs finished`;
  document.getElementById("members").innerHTML =
    row(["member","state","heartbeat","arc","fetched","pages/s (10 s)","inbound","frontier","fetch","parse","store",
         "outbox","admission"], "th") +
    members.map(m => {
      const q = m.queues || {}, reach = m.reachable === false ? " (unreachable)" : "";
      const stateCls = m.state === "alive" ? "alive" : (m.state === "suspect" ? "suspect" : "down");
      const adm = m.admission ? (m.admission.open ? "open" : "held: " + esc(m.admission.blocked_by)) : "";
      return row([`${esc(m.id)}${m.self ? " (this node)" : ""}`, badge((m.left ? "left" : m.state) + reach, stateCls),
                  `${fmt(m.heartbeat_age_s, 1)} s`, `${fmt(100 * (m.arc_share || 0), 1)}%`, fmt(m.fetched),
                  fmt(windowedRate(m.id, 10), 1), fmt(q.inbound), fmt(q.frontier), fmt(q.fetch), fmt(q.parse),
                  fmt(q.store), fmt(m.outbox), adm], "td");
    }).join("");
  document.getElementById("queues").innerHTML = row(["stage","depth","oldest age (s)","blocked puts"], "th") +
    Object.entries(s.queues).map(([k, q]) => row([esc(k), fmt(q.depth), fmt(q.oldest_age_s, 2), fmt(q.blocked_puts)], "td")).join("");
  const a = s.admission || {};
  document.getElementById("admission").innerHTML = a.open ? badge("open", "idle") :
    badge("held: " + (a.blocked_by || "?"), "crawling") + ` <span class="muted">(${esc((a.pressure_sources || []).join(", "))})</span>`;
  const c = s.counters;
  document.getElementById("counters").textContent = `fetched ${c.fetched} · done ${c.pages_done} · failed ${c.failed} · ` +
    `retries ${c.retries} · out of scope ${c.out_of_scope ?? 0}`;
  document.getElementById("hosts").innerHTML =
    row(["host","in flight","limit","throttle point","backoff level","crawl delay (s)","queued","fetched","throttled"], "th") +
    (s.hosts || []).map(h => row([esc(h.host), fmt(h.in_flight), fmt(h.limit), fmt(h.throttle_point), fmt(h.backoff_level),
      fmt(h.crawl_delay_s, 1), fmt(h.queued), fmt(h.fetched), fmt(h.throttled)], "td")).join("");
  const table = s.host_table || {};
  document.getElementById("health").textContent = Object.entries(table.health || {})
    .filter(([, n]) => n).map(([state, n]) => `${state} ${n}`).join(" · ");
  const worst = table.worst || [];
  document.getElementById("worst").innerHTML = worst.length ?
    row(["host","health","score","limit","refusals","reasons"], "th") +
    worst.map(h => row([esc(h.host), badge(h.health, h.health === "slow" ? "crawling" : "unreachable"),
      fmt(h.health_score), fmt(h.limit), fmt(h.refusals), esc((h.health_reasons || []).join("; "))], "td")).join("") :
    row(["every host is healthy"], "td");
  drawChart();
  return refreshRing(members);
}

function showStale(){
  const age = lastOk ? (Date.now() - lastOk) / 1000 : null;
  const banner = document.getElementById("stale");
  if (age === null || age * 1000 > STALE_AFTER_MS) {
    banner.style.display = "block";
    banner.textContent = age === null ? "this node has not answered yet" :
      `stale: this node has not answered for ${age.toFixed(0)} s; what is shown is from then`;
    const st = document.getElementById("state"); st.textContent = "unreachable"; st.className = "state unreachable";
  } else {
    banner.style.display = "none";
  }
}

async function tick(){
  const control = new AbortController();
  const timer = setTimeout(() => control.abort(), 2000);
  try {
    const response = await fetch("/v1/status", {cache: "no-store", signal: control.signal});
    if (!response.ok) throw new Error("HTTP " + response.status);
    const s = await response.json();
    lastOk = Date.now();
    await render(s);
  } catch (e) {
    /* shown as stale below */
  } finally {
    clearTimeout(timer);
    showStale();
  }
}
tick(); setInterval(tick, 1000);
</script></body></html>
"""
