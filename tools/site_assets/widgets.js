// Saved anywidgets, live in the page without a kernel.
//
// An anywidget's saved state holds its own front-end module (_esm, with render({model, el})),
// its CSS (_css) and its synced traits. tools/site.py puts that state in a
// <script class="course-widget-state"> inside each <div class="course-anywidget">; this script
// imports the module and renders it against a model that lives in the page: get, set, on, off
// and save_changes behave as anywidget's model does, except that no change goes to Python
// (there is none). The text summary saved with the output stays shown when anything fails.
(function () {
  "use strict";

  function pageModel(state) {
    const listeners = new Map();
    const emit = (name, value) => {
      for (const callback of [...(listeners.get(name) || [])]) callback(value);
    };
    return {
      get: (name) => state[name],
      set: (name, value) => {
        if (state[name] === value) return;
        state[name] = value;
        emit(`change:${name}`, value);
        emit("change", value);
      },
      on: (name, callback) => {
        for (const one of name.split(/\s+/)) {
          if (!listeners.has(one)) listeners.set(one, new Set());
          listeners.get(one).add(callback);
        }
      },
      off: (name, callback) => {
        for (const [one, set] of listeners) {
          if (name && one !== name) continue;
          if (callback) set.delete(callback);
          else set.clear();
        }
      },
      save_changes: () => {}, // nothing to sync with: the page has no kernel
      send: () => {},
      widget_manager: {
        get_model: () => Promise.reject(new Error("no widget manager in a static page")),
      },
    };
  }

  async function renderOne(container) {
    const holder = container.querySelector("script.course-widget-state");
    const state = JSON.parse(holder.textContent);
    if (state._css) {
      const style = document.createElement("style");
      style.textContent = state._css;
      document.head.appendChild(style);
    }
    const url = URL.createObjectURL(new Blob([state._esm], { type: "text/javascript" }));
    let module;
    try {
      module = await import(url);
    } finally {
      URL.revokeObjectURL(url);
    }
    let widget = module.default || module;
    if (typeof widget === "function") widget = await widget(); // export default () => ({render})
    const model = pageModel(state);
    if (typeof widget.initialize === "function") await widget.initialize({ model });
    const el = document.createElement("div");
    el.className = "course-widget-view";
    container.insertBefore(el, holder);
    await widget.render({ model, el });
    container.classList.add("course-widget-live");
  }

  function renderAll() {
    for (const container of document.querySelectorAll(".course-anywidget")) {
      renderOne(container).catch((error) => {
        container.classList.add("course-widget-failed");
        console.warn("widget not rendered; its text summary stays:", error);
      });
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", renderAll);
  else renderAll();
})();
