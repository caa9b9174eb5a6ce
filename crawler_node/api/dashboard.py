"""The live dashboard served at ``GET /``: one static page that polls /v1/status."""

DASHBOARD_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>crawler-node</title>
<style>
 body{font:14px system-ui,sans-serif;margin:2em;color:#222}
 table{border-collapse:collapse;margin:1em 0} td,th{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:right}
 th:first-child,td:first-child{text-align:left} .idle{color:#2a7} .busy{color:#c70}
</style></head><body>
<h1>crawler-node <span id="node"></span> <small id="state"></small></h1>
<div id="counters"></div>
<h2>Queues</h2><table id="queues"></table>
<h2>Busiest hosts</h2><table id="hosts"></table>
<script>
function row(cells, tag){return "<tr>"+cells.map(c=>"<"+tag+">"+c+"</"+tag+">").join("")+"</tr>";}
async function tick(){
  try{
    const s = await (await fetch("/v1/status")).json();
    document.getElementById("node").textContent = s.node_id;
    const st = document.getElementById("state");
    st.textContent = s.idle ? "idle" : "crawling"; st.className = s.idle ? "idle" : "busy";
    const c = s.counters;
    document.getElementById("counters").textContent =
      `fetched ${c.fetched} · done ${c.pages_done} · failed ${c.failed} · ` +
      `retries ${c.retries} · ${s.rates.fetched_per_s} fetches/s`;
    document.getElementById("queues").innerHTML = row(["stage","depth","oldest age (s)","blocked puts"],"th") +
      Object.entries(s.queues).map(([k,q])=>row([k,q.depth,q.oldest_age_s??"",q.blocked_puts??""],"td")).join("");
    document.getElementById("hosts").innerHTML = row(["host","in flight","limit","queued","fetched","throttled"],"th") +
      s.hosts.map(h=>row([h.host,h.in_flight,h.limit,h.queued,h.fetched,h.throttled],"td")).join("");
  }catch(e){document.getElementById("state").textContent="unreachable";}
}
tick(); setInterval(tick, 1000);
</script></body></html>
"""
