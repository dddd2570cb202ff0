// The session inspector's only script besides htmx: every htmx request carries the API key the
// person typed (kept in this tab's sessionStorage, sent as an Authorization header, never a
// cookie), and a refused request is shown instead of silently ignored.
(function () {
  "use strict";
  var KEY = "agentkeep-inspector-key";
  document.addEventListener("htmx:configRequest", function (event) {
    var key = window.sessionStorage.getItem(KEY);
    if (key) {
      event.detail.headers["Authorization"] = "Bearer " + key;
    }
  });
  document.addEventListener("htmx:responseError", function (event) {
    var status = document.getElementById("status");
    if (status) {
      status.textContent = "The host answered " + event.detail.xhr.status + ": " + event.detail.xhr.responseText;
    }
  });
  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("key-form");
    if (!form) {
      return;
    }
    var input = document.getElementById("key");
    input.value = window.sessionStorage.getItem(KEY) || "";
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      window.sessionStorage.setItem(KEY, input.value.trim());
      document.getElementById("status").textContent = "";
      window.htmx.trigger(document.getElementById("sessions"), "reload");
    });
  });
})();
