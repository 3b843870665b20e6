// Moves a run's progress bars as server-sent events arrive (the page works without it).
(function () {
  "use strict";
  var main = document.querySelector("main[data-events]");
  if (!main || !window.EventSource) return;
  var note = document.getElementById("live-note");
  var fresh = document.getElementById("new-calls");
  // A call's page follows that call only; it says so when the call ends.
  var only = main.getAttribute("data-call");
  var ended = document.getElementById("call-ended");

  function duration(s) {
    if (s === null || s === undefined) return "-";
    if (s < 60) return s.toFixed(1) + "s";
    var m = Math.floor(s / 60), r = Math.floor(s % 60);
    return m < 60 ? m + "m" + (r < 10 ? "0" : "") + r + "s" : Math.floor(m / 60) + "h" + (m % 60 < 10 ? "0" : "") + (m % 60) + "m";
  }
  function field(row, name) { return row.querySelector('[data-field="' + name + '"]'); }
  function text(row, name, value) { var el = field(row, name); if (el) el.textContent = value; }
  function stateText(c) {
    if (c.state === "running") return "running";
    if (c.state === "waiting") return "waiting for a slot" + (c.ahead === null ? "" : " (" + c.ahead + " ahead)");
    if (c.state === "queued") return "queued";
    return "";
  }

  function update(c) {
    var row = document.getElementById("call-" + c.tool_call_id);
    if (!row) return false;
    var status = field(row, "status");
    if (status) { status.textContent = c.status; status.className = "s-" + c.status; }
    row.className = "row-" + c.status;
    text(row, "detail", c.error_code || c.evidence_status || "");
    text(row, "attempt", String(c.attempt));
    text(row, "queued_s", duration(c.queued_s));
    text(row, "ran_s", duration(c.ran_s));
    text(row, "total_s", duration(c.total_s));
    text(row, "state", stateText(c));
    var bar = field(row, "fraction");
    if (bar) {
      bar.parentNode.hidden = c.state !== "running" || c.fraction === null;
      var value = Math.round((c.fraction || 0) * 1000);
      bar.value = value;
      bar.textContent = Math.round(value / 10) + " %";
      text(row, "percent", c.fraction === null ? "" : Math.round(c.fraction * 100) + " %");
    }
    text(row, "message", c.message || "");
    var cancel = field(row, "cancel");
    if (cancel) cancel.hidden = c.status !== "PROJECTING";
    return true;
  }

  var source = new EventSource(main.getAttribute("data-events"));
  source.addEventListener("calls", function (event) {
    var data = JSON.parse(event.data);
    if (!data.calls) return;
    var unknown = 0;
    data.calls.forEach(function (c) {
      if (only !== null && c.tool_call_id !== only) return;
      if (!update(c)) unknown += 1;
      if (ended && c.status !== "PROJECTING") ended.hidden = false;
    });
    if (note) note.hidden = false;
    if (fresh) fresh.hidden = unknown === 0;
  });
  source.onerror = function () { if (note) note.hidden = true; };
})();
