// The SQL console's editor (app/pages/sql.py, issue #14): the page's textarea gets a
// highlighted copy of its text drawn behind it, a completion list of the snapshot's view and
// column names, and Ctrl/Cmd+Enter to run. Self-written, no dependencies, nothing inline (the
// page's Content-Security-Policy allows scripts from this origin only).
(function () {
  "use strict";
  const EDITOR_ID = "sql-editor";
  const RUN_ID = "sql-run";
  const KEYWORDS = new Set((
    "select from where group by order having limit offset with as and or not in is null " +
    "join left right inner outer full cross on using union all distinct case when then else " +
    "end asc desc between like ilike values over partition window qualify filter exists cast " +
    "true false interval date timestamp describe show summarize recursive any some except " +
    "intersect nulls first last natural lateral pivot unpivot"
  ).split(" "));
  const TOKEN = /(--[^\n]*|\/\*[\s\S]*?(?:\*\/|$))|('(?:[^']|'')*'?)|("(?:[^"]|"")*"?)|(\b\d+(?:\.\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)/g;
  const state = { views: {}, words: [] };

  function escapeHtml(text) {
    return text.replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" }[c]));
  }

  function highlight(text) {
    let out = "";
    let last = 0;
    text.replace(TOKEN, (match, comment, str, ident, num, word, offset) => {
      out += escapeHtml(text.slice(last, offset));
      let cls = null;
      if (comment) cls = "sql-com";
      else if (str) cls = "sql-str";
      else if (ident) cls = "sql-ident";
      else if (num) cls = "sql-num";
      else if (word && KEYWORDS.has(word.toLowerCase())) cls = "sql-kw";
      else if (word && Object.prototype.hasOwnProperty.call(state.views, word)) cls = "sql-view";
      out += cls ? '<span class="' + cls + '">' + escapeHtml(match) + "</span>" : escapeHtml(match);
      last = offset + match.length;
      return match;
    });
    // a trailing newline needs a character after it, or the copy is one line short
    return out + escapeHtml(text.slice(last)) + "\n ";
  }

  function setValue(area, value, caret) {
    // through the native setter and an input event, so React (Dash) sees the change
    const setter = Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, "value").set;
    setter.call(area, value);
    area.dispatchEvent(new Event("input", { bubbles: true }));
    area.setSelectionRange(caret, caret);
  }

  function attach(area) {
    if (area.dataset.sqlEditor) return;
    area.dataset.sqlEditor = "1";
    area.setAttribute("aria-label", "SQL query");
    area.setAttribute("aria-autocomplete", "list");
    const wrap = area.parentElement;
    const copy = wrap.querySelector(".sql-highlight");
    const list = wrap.querySelector(".sql-complete");
    let shown = "";
    let choices = [];
    let active = 0;

    function redraw() {
      if (area.value !== shown) {
        shown = area.value;
        copy.innerHTML = highlight(shown);
      }
      copy.scrollTop = area.scrollTop;
      copy.scrollLeft = area.scrollLeft;
    }

    function wordBeforeCaret() {
      const before = area.value.slice(0, area.selectionStart);
      const m = /[A-Za-z_][A-Za-z0-9_]*$/.exec(before);
      return m ? m[0] : "";
    }

    function close() {
      choices = [];
      list.hidden = true;
      list.replaceChildren();
      area.setAttribute("aria-expanded", "false");
    }

    function open() {
      const word = wordBeforeCaret();
      if (!word) { close(); return; }
      const lower = word.toLowerCase();
      choices = state.words.filter((w) => w.name.toLowerCase().startsWith(lower) &&
        w.name !== word).slice(0, 12);
      if (!choices.length) { close(); return; }
      active = 0;
      list.replaceChildren(...choices.map((w, i) => {
        const item = document.createElement("li");
        item.id = "sql-complete-" + i;
        item.setAttribute("role", "option");
        item.className = i === active ? "active" : "";
        item.textContent = w.name;
        const kind = document.createElement("span");
        kind.className = "sql-complete-kind";
        kind.textContent = w.kind;
        item.appendChild(kind);
        item.addEventListener("mousedown", (e) => { e.preventDefault(); accept(i); });
        return item;
      }));
      list.hidden = false;
      area.setAttribute("aria-expanded", "true");
    }

    function mark() {
      Array.from(list.children).forEach((el, i) => { el.className = i === active ? "active" : ""; });
      area.setAttribute("aria-activedescendant", "sql-complete-" + active);
    }

    function accept(i) {
      const word = wordBeforeCaret();
      const at = area.selectionStart - word.length;
      const name = choices[i].name;
      const value = area.value.slice(0, at) + name + area.value.slice(area.selectionStart);
      close();
      setValue(area, value, at + name.length);
      redraw();
    }

    area.addEventListener("input", () => { redraw(); open(); });
    area.addEventListener("scroll", redraw);
    area.addEventListener("blur", () => setTimeout(close, 100));
    area.addEventListener("keydown", (e) => {
      if ((e.ctrlKey || e.metaKey) && e.key === "Enter") {
        e.preventDefault();
        close();
        const run = document.getElementById(RUN_ID);
        if (run) run.click();
        return;
      }
      if (!choices.length) return;
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        active = (active + (e.key === "ArrowDown" ? 1 : choices.length - 1)) % choices.length;
        mark();
      } else if (e.key === "Enter" || e.key === "Tab") {
        e.preventDefault();
        accept(active);
      } else if (e.key === "Escape") {
        close();
      }
    });
    // Dash may set the text from the server (a saved query, the history): no input event then
    setInterval(redraw, 250);
    redraw();
  }

  function scan() {
    const area = document.getElementById(EDITOR_ID);
    if (area) attach(area);
  }

  new MutationObserver(scan).observe(document.documentElement, { childList: true, subtree: true });
  document.addEventListener("DOMContentLoaded", scan);

  // The page hands the snapshot's views and columns over through a clientside callback.
  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    sqlEditor: {
      setSchema: function (schema) {
        state.views = schema || {};
        const words = [];
        const seen = new Set();
        Object.keys(state.views).sort().forEach((v) => { words.push({ name: v, kind: "view" }); });
        Object.keys(state.views).forEach((v) => {
          (state.views[v] || []).forEach((c) => {
            if (!seen.has(c)) { seen.add(c); words.push({ name: c, kind: "column" }); }
          });
        });
        state.words = words;
        return Object.keys(state.views).length + " views";
      },
    },
  });
})();
