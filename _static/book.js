// Cells of the notebooks' tables holding at most 24 characters (a number, "mean ± sd", a short label) are
// kept on one line (CSS class flkit-short); longer text still wraps.
document.addEventListener("DOMContentLoaded", () => {
  for (const cell of document.querySelectorAll("div.cell_output table td, div.cell_output table th")) {
    if (cell.textContent.trim().length <= 24) cell.classList.add("flkit-short");
  }
});
