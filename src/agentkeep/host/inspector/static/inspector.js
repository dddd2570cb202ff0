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
  // Exports come from the sessions API, which wants the key in a header: fetched, then saved.
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button.export") : null;
    if (!button) {
      return;
    }
    var url = "../api/agents/" + encodeURIComponent(button.dataset.agent) + "/sessions/" +
      encodeURIComponent(button.dataset.id) + "/export?format=" + encodeURIComponent(button.dataset.format);
    var key = window.sessionStorage.getItem(KEY);
    window.fetch(url, { headers: key ? { Authorization: "Bearer " + key } : {} })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("the host answered " + response.status);
        }
        return response.blob();
      })
      .then(function (blob) {
        var link = document.createElement("a");
        link.href = URL.createObjectURL(blob);
        link.download = button.dataset.id + (button.dataset.format === "json" ? ".json" : ".md");
        document.body.appendChild(link);
        link.click();
        link.remove();
      })
      .catch(function (error) {
        document.getElementById("status").textContent = "Export failed: " + error.message;
      });
  });
  // Two views, sessions and memory (when the host keeps memories): one shown at a time.
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest(".views button") : null;
    if (!button) {
      return;
    }
    var memory = button.id === "show-memory";
    document.getElementById("sessions-view").hidden = memory;
    document.getElementById("memory-view").hidden = !memory;
    document.getElementById("show-sessions").classList.toggle("current", !memory);
    document.getElementById("show-memory").classList.toggle("current", memory);
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
