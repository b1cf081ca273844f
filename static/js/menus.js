/* The top bar's menus are <details> elements: they open and close without JavaScript. With it, one
 * menu is open at a time, and a click elsewhere or Escape closes it. */
(function () {
  "use strict";

  function menus() { return Array.prototype.slice.call(document.querySelectorAll("header.topbar details.menu")); }

  document.addEventListener("click", function (event) {
    menus().forEach(function (menu) {
      if (menu.open && !menu.contains(event.target)) menu.open = false;
    });
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    menus().forEach(function (menu) {
      if (menu.open) { menu.open = false; menu.querySelector("summary").focus(); }
    });
  });
  document.addEventListener("toggle", function (event) {
    var opened = event.target;
    if (!opened.matches || !opened.matches("header.topbar details.menu") || !opened.open) return;
    menus().forEach(function (menu) { if (menu !== opened) menu.open = false; });
  }, true);
})();
