// The site's navigation and search. Search runs in the page: its index (assets/search-index.js,
// written by tools/site.py: one entry per section of every page) is loaded as a script the
// first time the search box is used, so it works from a web server and from the file system.
(function () {
  "use strict";
  const root = document.body.dataset.root || "";

  // -- the lesson list on narrow screens --
  const toggle = document.querySelector(".nav-toggle");
  if (toggle) {
    toggle.addEventListener("click", () => document.body.classList.toggle("nav-open"));
    // a tap on a link in the list, or anywhere outside it, closes it; so does Escape
    document.addEventListener("click", (event) => {
      if (!document.body.classList.contains("nav-open") || toggle.contains(event.target)) return;
      const inList = event.target.closest(".site-sidebar");
      if (!inList || event.target.closest("a")) document.body.classList.remove("nav-open");
    });
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape") document.body.classList.remove("nav-open");
    });
  }

  // -- the setup cell: folded, a click unfolds it --
  for (const cell of document.querySelectorAll(".celltag_course-setup")) {
    cell.addEventListener("click", () => cell.classList.add("unfolded"));
  }

  // -- search --
  const input = document.getElementById("search-input");
  const box = document.getElementById("search-results");
  if (!input || !box) return;
  let loading = null;

  function loadIndex() {
    if (window.COURSE_SEARCH_INDEX) return Promise.resolve(window.COURSE_SEARCH_INDEX);
    if (!loading) {
      loading = new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = root + "assets/search-index.js";
        script.onload = () => resolve(window.COURSE_SEARCH_INDEX || []);
        script.onerror = () => reject(new Error("the search index did not load"));
        document.head.appendChild(script);
      });
    }
    return loading;
  }

  const terms = (query) =>
    query.toLowerCase().split(/\s+/).filter((t) => t.length > 1 || /\d/.test(t));

  function count(haystack, term) {
    let n = 0;
    for (let i = haystack.indexOf(term); i >= 0; i = haystack.indexOf(term, i + term.length)) n++;
    return n;
  }

  // Every term must occur (in the page title, the section heading or its text); headings weigh
  // more than text.
  function search(index, query) {
    const wanted = terms(query);
    if (!wanted.length) return [];
    const found = [];
    for (const entry of index) {
      const title = entry.page.toLowerCase();
      const section = entry.section.toLowerCase();
      const text = entry.text.toLowerCase();
      let score = 0;
      for (const term of wanted) {
        const s = 8 * count(section, term) + 3 * count(title, term) + count(text, term);
        if (!s) { score = 0; break; }
        score += s;
      }
      if (score) found.push({ entry, score });
    }
    found.sort((a, b) => b.score - a.score);
    return found.slice(0, 30);
  }

  function snippet(text, query) {
    const lower = text.toLowerCase();
    const first = terms(query).map((t) => lower.indexOf(t)).filter((i) => i >= 0);
    const at = first.length ? Math.min(...first) : 0;
    const start = Math.max(0, at - 60);
    return (start > 0 ? "…" : "") + text.slice(start, start + 180) + (text.length > start + 180 ? "…" : "");
  }

  function mark(element, text, query) {
    // text with the query's terms in <mark>, built from text nodes (never innerHTML)
    const wanted = terms(query).map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    if (!wanted.length) { element.textContent = text; return; }
    const pattern = new RegExp(`(${wanted.join("|")})`, "gi");
    text.split(pattern).forEach((part, i) => {
      if (i % 2) element.appendChild(Object.assign(document.createElement("mark"), { textContent: part }));
      else element.appendChild(document.createTextNode(part));
    });
  }

  function show(results, query) {
    box.replaceChildren();
    if (!query.trim()) { box.hidden = true; return; }
    if (!results.length) {
      box.appendChild(Object.assign(document.createElement("p"),
        { className: "search-none", textContent: `Nothing found for “${query}”.` }));
    }
    for (const { entry } of results) {
      const a = document.createElement("a");
      a.className = "search-result";
      a.href = root + entry.url;
      const where = document.createElement("span");
      where.className = "search-where";
      where.textContent = entry.section ? `${entry.page} › ${entry.section}` : entry.page;
      const text = document.createElement("span");
      text.className = "search-snippet";
      mark(text, snippet(entry.text, query), query);
      a.append(where, text);
      box.appendChild(a);
    }
    box.hidden = false;
  }

  let timer = null;
  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      const query = input.value;
      loadIndex().then((index) => show(search(index, query), query))
        .catch((error) => { box.hidden = false; box.textContent = String(error); });
    }, 120);
  });
  input.addEventListener("focus", () => { loadIndex().catch(() => {}); });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") { input.value = ""; show([], ""); }
    if (event.key === "Enter") {
      const first = box.querySelector("a.search-result");
      if (first) window.location.href = first.href;
    }
  });
  document.addEventListener("click", (event) => {
    if (!event.target.closest(".search")) box.hidden = true;
  });
})();
