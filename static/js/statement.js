/* A statement's "Print / save as PDF" button: the browser's own print dialog (which saves as PDF too),
 * laid out by css/statement.css's print rules. (A script file: the Content-Security-Policy allows no
 * inline script.) Statements swapped in by htmx (another month) get it too. */
(function () {
  "use strict";
  if (window.consoleStatementPrint) return;  // once per document, however often the page's script runs
  window.consoleStatementPrint = true;
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-print]") : null;
    if (button) { event.preventDefault(); window.print(); }
  });
})();
