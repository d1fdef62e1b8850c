/* "Try it" (mcp_app.admin.tryit): the arguments as a form built from the schema or as raw JSON, and the run shown
   live. The form is posted as it is (CSRF token included) with _stream=1; the answer is NDJSON, one line per
   notification while the call runs and then the outcome's HTML. Without this script the page posts normally. */
(function () {
  "use strict";

  function showMode(form) {
    var chosen = form.querySelector("input[name=input_mode]:checked");
    var mode = chosen ? chosen.value : "form";
    form.querySelectorAll("fieldset[data-mode]").forEach(function (fieldset) {
      fieldset.hidden = fieldset.dataset.mode !== mode;
    });
  }

  function text(tag, content) {
    var element = document.createElement(tag);
    element.textContent = content;
    return element;
  }

  function onNotification(message, live) {
    var params = message.params || {};
    if (message.method === "notifications/progress") {
      var box = live.querySelector("#mcp-try-it-live-progress");
      var bar = box.querySelector(".mcp-progress-bar");
      var label = params.progress + (params.total ? " / " + params.total : "") + (params.message ? " — " + params.message : "");
      box.hidden = false;
      if (params.total) {
        var percent = Math.max(0, Math.min(100, Math.round((100 * params.progress) / params.total)));
        bar.classList.remove("mcp-indeterminate");
        bar.firstElementChild.style.width = percent + "%";
        box.dataset.percent = String(percent);
        label = percent + " % — " + label;
      }
      live.querySelector("#mcp-try-it-live-text").textContent = label;
      live.querySelector("#mcp-try-it-live-steps").appendChild(text("li", label));
    } else {
      live.querySelector("#mcp-try-it-live-steps").appendChild(text("li", message.method + " " + JSON.stringify(params)));
    }
  }

  async function run(form, live) {
    var data = new FormData(form);
    data.set("_stream", "1");
    var box = live.querySelector("#mcp-try-it-live-progress");
    box.hidden = false;
    delete box.dataset.percent;
    box.querySelector(".mcp-progress-bar").classList.add("mcp-indeterminate");
    box.querySelector(".mcp-progress-bar").firstElementChild.style.width = "";
    live.querySelector("#mcp-try-it-live-text").textContent = "running…";
    live.querySelector("#mcp-try-it-live-steps").replaceChildren();
    live.querySelector("#mcp-try-it-live-outcome").replaceChildren();
    live.dataset.state = "running";
    var response = await fetch(form.action || window.location.href, {
      method: "POST",
      body: data,
      credentials: "same-origin",
      headers: { "X-Requested-With": "XMLHttpRequest" },
    });
    var type = response.headers.get("content-type") || "";
    if (!type.startsWith("application/x-ndjson")) {
      // Invalid form (or an error page): show the page the server answered.
      var page = new DOMParser().parseFromString(await response.text(), "text/html");
      var main = page.querySelector("#content-main");
      if (main) {
        document.querySelector("#content-main").replaceWith(main);
        init();
      }
      return;
    }
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    for (;;) {
      var chunk = await reader.read();
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      var lines = buffer.split("\n");
      buffer = lines.pop();
      lines.forEach(function (line) {
        if (!line.trim()) return;
        var event = JSON.parse(line);
        if (event.type === "notification") onNotification(event.message, live);
        if (event.type === "outcome") {
          live.querySelector("#mcp-try-it-live-outcome").innerHTML = event.html;
          finish(live, "finished", "done");
        }
      });
    }
    if (live.dataset.state !== "done") finish(live, "ended without an answer", "done");
  }

  // The run is over: the bar stops moving and its text stops saying "running…".
  function finish(live, message, state) {
    var bar = live.querySelector("#mcp-try-it-live-progress .mcp-progress-bar");
    bar.classList.remove("mcp-indeterminate");
    if (state === "done") bar.firstElementChild.style.width = "100%";
    live.querySelector("#mcp-try-it-live-text").textContent = message;
    live.dataset.state = state;
  }

  function init() {
    var form = document.getElementById("mcp-try-it-form");
    var live = document.getElementById("mcp-try-it-live");
    if (!form || !live) return;
    form.querySelectorAll("input[name=input_mode]").forEach(function (radio) {
      radio.addEventListener("change", function () { showMode(form); });
    });
    showMode(form);
    if (window.mcpAttachJsonEditors) window.mcpAttachJsonEditors(document);
    form.addEventListener("submit", function (event) {
      if (!window.fetch || !window.ReadableStream) return; // the plain post still works
      event.preventDefault();
      run(form, live).catch(function (error) {
        live.querySelector("#mcp-try-it-live-outcome").replaceChildren(text("p", "The run failed: " + error));
        finish(live, "failed", "failed");
      });
    });
  }

  document.addEventListener("DOMContentLoaded", init);
})();
