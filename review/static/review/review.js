// Keyboard and charts of the review inbox (no inline script: the admin's Content-Security-Policy allows 'self').
(function () {
  "use strict";
  const root = document.querySelector(".review[data-page]");
  if (!root) return;
  const page = root.dataset.page;
  const typing = (e) => ["INPUT", "TEXTAREA", "SELECT"].includes(e.target.tagName) && e.target.type !== "checkbox";
  const click = (id) => { const el = document.getElementById(id); if (el) { el.click(); return true; } return false; };

  if (page === "inbox") {
    const rows = Array.from(document.querySelectorAll("tr.inbox-row"));
    let at = rows.length ? 0 : -1;
    const show = () => rows.forEach((r, i) => r.classList.toggle("selected", i === at));
    show();
    document.addEventListener("keydown", (e) => {
      if (typing(e) || e.ctrlKey || e.metaKey || e.altKey) return;
      if (e.key === "j" && at < rows.length - 1) { at += 1; show(); e.preventDefault(); }
      else if (e.key === "k" && at > 0) { at -= 1; show(); e.preventDefault(); }
      else if ((e.key === "Enter" || e.key === "o") && at >= 0) { window.location = rows[at].dataset.href; e.preventDefault(); }
    });
  }
  if (page === "decide") {
    document.addEventListener("keydown", (e) => {
      if (typing(e) || e.ctrlKey || e.metaKey || e.altKey) return;
      const done = { a: "btn-approve", r: "btn-reject", s: "btn-skip" }[e.key];
      if (done && (click(done) || (e.key === "s" && click("btn-next")))) e.preventDefault();
    });
  }
  if (page === "confirm") {
    document.addEventListener("keydown", (e) => {
      if (e.key === "c" || e.key === "Enter") { if (click("btn-confirm")) e.preventDefault(); }
      else if (e.key === "Escape") { click("btn-cancel"); }
    });
  }

  const chart = (canvasId, dataId, build) => {
    const canvas = document.getElementById(canvasId);
    const data = document.getElementById(dataId);
    if (!canvas || !data || typeof Chart === "undefined") return;
    new Chart(canvas, build(JSON.parse(data.textContent)));
  };
  window.addEventListener("load", () => {
    chart("progress-chart", "progress-data", (rows) => ({
      data: {
        labels: rows.map((r) => r.day.slice(5)),
        datasets: [
          { type: "bar", label: "decided", data: rows.map((r) => r.decided), yAxisID: "y" },
          { type: "line", label: "backlog", data: rows.map((r) => r.backlog), yAxisID: "y", spanGaps: true },
          { type: "line", label: "approval rate", data: rows.map((r) => r.approval_rate), yAxisID: "rate", spanGaps: true },
        ],
      },
      options: { animation: false, scales: { y: { beginAtZero: true }, rate: { position: "right", min: 0, max: 1 } } },
    }));
    chart("rates-chart", "rates-data", (rows) => ({
      type: "bar",
      data: { labels: rows.map((r) => r.label), datasets: [{ label: "rate at proposal time", data: rows.map((r) => r.value) }] },
      options: { animation: false, indexAxis: "y", scales: { x: { min: 0, max: 1 } } },
    }));
  });
})();
