// Bar charts of the admin (Chart.js, vendored once): every <canvas data-chart="ID"> is drawn from the JSON in
// <script id="ID" type="application/json"> {labels, datasets: [{label, data, color}], stacked, horizontal, max}.
window.addEventListener("load", () => {
  if (typeof Chart === "undefined") return;
  document.querySelectorAll("canvas[data-chart]").forEach((canvas) => {
    const source = document.getElementById(canvas.dataset.chart);
    if (!source) return;
    const spec = JSON.parse(source.textContent);
    const value = { stacked: !!spec.stacked, beginAtZero: true };
    if (spec.max !== undefined) value.max = spec.max;
    new Chart(canvas, {
      type: "bar",
      data: {
        labels: spec.labels,
        datasets: spec.datasets.map((d) => ({ label: d.label, data: d.data, backgroundColor: d.color })),
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        indexAxis: spec.horizontal ? "y" : "x",
        scales: spec.horizontal ? { x: value, y: { stacked: !!spec.stacked } } : { y: value, x: { stacked: !!spec.stacked } },
      },
    });
  });
});
