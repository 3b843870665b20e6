// A job's page: its counts follow the job's server-sent events until it has ended.
(function () {
  "use strict";
  var live = document.getElementById("job-live");
  if (!live || !window.EventSource) { return; }
  var source = new EventSource(live.getAttribute("data-events"));
  source.onmessage = function (event) {
    var counts = JSON.parse(event.data);
    document.querySelectorAll("[data-job]").forEach(function (node) {
      var name = node.getAttribute("data-job");
      if (Object.prototype.hasOwnProperty.call(counts, name)) {
        node.textContent = String(counts[name]);
      }
    });
    if (counts.state !== "running" && counts.state !== "cancelling") {
      source.close();
      var cancel = document.getElementById("job-cancel");
      if (cancel) { cancel.hidden = true; }
      live.textContent = "The job has ended: reload to see its versions and failures.";
    }
  };
}());
