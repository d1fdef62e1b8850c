/* JSON fields of the mcp-host admin: jsoneditor (code mode) over the hidden textarea that is posted.
   The textarea keeps the text as typed, valid or not: the server's form field reports where invalid JSON fails,
   and the editor marks the same error at its line while typing. Inline rows added later get their editor too. */
(function () {
  "use strict";

  function attach(container) {
    if (container.jsonEditor || !window.JSONEditor) return;
    var textarea = document.getElementById(container.dataset.for);
    if (!textarea || textarea.id.indexOf("__prefix__") !== -1) return;
    var status = document.createElement("p");
    status.className = "mcp-json-status";
    status.setAttribute("aria-live", "polite");
    container.after(status);
    var editor = new JSONEditor(container, {
      mode: "code",
      modes: ["code", "tree", "text"],
      mainMenuBar: true,
      statusBar: true,
      onChangeText: function (text) {
        textarea.value = text;
        check(text);
      },
    });
    function check(text) {
      if (!text.trim()) { status.textContent = ""; return; }
      try { JSON.parse(text); status.textContent = ""; container.classList.remove("mcp-json-invalid"); }
      catch (error) { status.textContent = "Invalid JSON: " + error.message; container.classList.add("mcp-json-invalid"); }
    }
    editor.setText(textarea.value.trim());
    check(textarea.value);
    container.jsonEditor = editor;
    // Whatever set the editor's text (typing, a paste, a script), the form posts what the editor shows.
    if (textarea.form) {
      textarea.form.addEventListener("submit", function () { textarea.value = editor.getText(); }, true);
      textarea.form.addEventListener("formdata", function (event) { event.formData.set(textarea.name, editor.getText()); });
    }
  }

  function attachAll(root) {
    (root || document).querySelectorAll(".mcp-json-editor").forEach(attach);
  }

  document.addEventListener("DOMContentLoaded", function () { attachAll(document); });
  document.addEventListener("formset:added", function (event) { attachAll(event.target); });
  window.mcpAttachJsonEditors = attachAll;
})();
