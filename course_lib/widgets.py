"""Interactive explorers for the lessons (lesson 02 onwards).

`AttentionExplorer(tokens, weights)` shows a sentence twice: the query tokens on top, the key
tokens below. Hover over a query token to see where it attends (the keys are shaded by their
weight); click it to lock the choice, click again to unlock. The state lives in synced traitlets,
so Python can read and set it:

    explorer = AttentionExplorer(tokens, weights)   # weights (n, n) or (num_heads, n, n)
    explorer                                        # shows the widget
    explorer.select("it")                           # what a click does, from Python
    explorer.selected, explorer.top_keys()          # 7, [("animal", 0.62), ...]

The widget is an `anywidget`: its JavaScript and CSS are the strings below, so nothing is built
or downloaded. Where widgets cannot render (a static notebook viewer, a terminal) the cell shows
the plain-text summary instead, and `attention_dropdown` is an ipywidgets-only fallback.

DOM contract (a browser test relies on it): the root element has the class `attention-explorer`;
each query token is an element with the class `ae-token` and a `data-index`; each key token has
the class `ae-key` and a `data-index`; the element with the class `ae-status` shows the current
query and its top attended keys (the same text as `AttentionExplorer.status_text()`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import anywidget
import torch
import traitlets
from torch import Tensor

from .validation import check_positive_int, is_int

__all__ = ["AttentionExplorer", "attention_dropdown", "as_attention_weights"]

NO_SELECTION_TEXT = "Hover over a query token to see where it attends; click to lock it."


def as_attention_weights(tokens: Sequence[str], weights: object) -> tuple[list[str], Tensor]:
    """Check tokens and weights for an explorer; return (tokens, weights (num_heads, n, n)).

    tokens: n strings. weights: (n, n) or (num_heads, n, n), each row a probability
    distribution over the keys (or all zeros, for a fully masked query).
    """
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(
            f"tokens must be a list of strings (one per position), got {type(tokens).__name__}"
        )
    tokens = list(tokens)
    if not tokens:
        raise ValueError("tokens is empty; it needs at least one token")
    bad = [t for t in tokens if not isinstance(t, str)]
    if bad:
        raise TypeError(f"tokens must all be strings, got {type(bad[0]).__name__} ({bad[0]!r})")
    if isinstance(weights, Tensor):
        w = weights.detach().to("cpu", torch.float64)
    else:
        try:
            w = torch.as_tensor(weights, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                "weights must be a tensor (n, n) or (num_heads, n, n), got "
                f"{type(weights).__name__}"
            ) from None
    n, given_shape = len(tokens), tuple(w.shape)
    if w.dim() == 2:
        w = w.unsqueeze(0)
    if w.dim() != 3 or w.shape[-1] != n or w.shape[-2] != n:
        raise ValueError(
            f"weights must be (n, n) or (num_heads, n, n) with n = len(tokens) = {n}, "
            f"got shape {given_shape}"
        )
    if not torch.isfinite(w).all() or (w < 0).any():
        raise ValueError(
            "weights must be finite and non-negative (attention weights, after the softmax)"
        )
    row_sums = w.sum(dim=-1)
    ok = ((row_sums - 1).abs() < 1e-3) | (row_sums.abs() < 1e-9)
    if not ok.all():
        head, row = (int(i) for i in (~ok).nonzero()[0])
        raise ValueError(
            f"every row of weights must sum to 1 (or be all zeros for a fully masked query); "
            f"row {row} of head {head} sums to {float(row_sums[head, row]):.3f}. "
            "Did you pass the scores before the softmax?"
        )
    return tokens, w


def top_keys_of(row: Sequence[float], tokens: Sequence[str], k: int) -> list[tuple[str, float]]:
    """The k largest weights of one row with their key tokens, largest first (ties: leftmost)."""
    order = sorted(range(len(row)), key=lambda j: (-row[j], j))
    return [(tokens[j], float(row[j])) for j in order[:k] if row[j] > 0]


_ESM = r"""
function topKeys(row, tokens, k) {
  const order = row.map((w, j) => j).sort((a, b) => (row[b] - row[a]) || (a - b));
  return order.slice(0, k).filter((j) => row[j] > 0).map((j) => [tokens[j], row[j]]);
}

function statusText(model) {
  const tokens = model.get("tokens");
  const selected = model.get("selected");
  if (selected < 0 || selected >= tokens.length) return model.get("empty_text");
  const row = model.get("weights")[model.get("head")][selected];
  const keys = topKeys(row, tokens, model.get("top_k"));
  const lock = model.get("locked") ? " (locked)" : "";
  const heads = model.get("weights").length;
  const head = heads > 1 ? `head ${model.get("head")}, ` : "";
  const list = keys.length ? keys.map(([t, w]) => `${t} ${w.toFixed(2)}`).join(", ")
                           : "nothing (every key is masked)";
  return `${head}query ${selected} "${tokens[selected]}"${lock} attends to: ${list}`;
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "attention-explorer";
  el.appendChild(root);

  function draw() {
    root.replaceChildren();
    const tokens = model.get("tokens");
    const weights = model.get("weights");
    const selected = model.get("selected");
    const head = model.get("head");

    if (model.get("title")) {
      const title = document.createElement("div");
      title.className = "ae-title";
      title.textContent = model.get("title");
      root.appendChild(title);
    }
    if (weights.length > 1) {
      const picker = document.createElement("select");
      picker.className = "ae-head";
      weights.forEach((_, h) => {
        const option = document.createElement("option");
        option.value = String(h);
        option.textContent = `head ${h}`;
        option.selected = h === head;
        picker.appendChild(option);
      });
      picker.addEventListener("change", () => {
        model.set("head", Number(picker.value));
        model.save_changes();
      });
      root.appendChild(picker);
    }

    const queries = document.createElement("div");
    queries.className = "ae-row ae-queries";
    queries.appendChild(Object.assign(document.createElement("span"),
      { className: "ae-label", textContent: "query" }));
    tokens.forEach((token, i) => {
      const chip = document.createElement("span");
      chip.className = "ae-token" + (i === selected ? " ae-selected" : "");
      if (i === selected && model.get("locked")) chip.classList.add("ae-locked");
      chip.dataset.index = String(i);
      chip.textContent = token;
      chip.tabIndex = 0;
      chip.title = "hover to preview, click to lock";
      const preview = () => {
        if (!model.get("locked") && model.get("selected") !== i) {
          model.set("selected", i);
          model.save_changes();
        }
      };
      const toggle = () => {
        if (model.get("locked") && model.get("selected") === i) {
          model.set("locked", false);
        } else {
          model.set("selected", i);
          model.set("locked", true);
        }
        model.save_changes();
      };
      chip.addEventListener("mouseenter", preview);
      chip.addEventListener("focus", preview);
      chip.addEventListener("click", toggle);
      chip.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); toggle(); }
      });
      queries.appendChild(chip);
    });
    root.appendChild(queries);

    const keys = document.createElement("div");
    keys.className = "ae-row ae-keys";
    keys.appendChild(Object.assign(document.createElement("span"),
      { className: "ae-label", textContent: "key" }));
    const row = selected >= 0 && selected < tokens.length ? weights[head][selected] : null;
    const peak = row ? Math.max(...row, 1e-9) : 1;
    tokens.forEach((token, j) => {
      const chip = document.createElement("span");
      chip.className = "ae-key";
      chip.dataset.index = String(j);
      const w = row ? row[j] : 0;
      chip.style.setProperty("--ae-strength", String(w / peak));
      chip.appendChild(Object.assign(document.createElement("span"),
        { className: "ae-key-token", textContent: token }));
      chip.appendChild(Object.assign(document.createElement("span"),
        { className: "ae-weight", textContent: row ? w.toFixed(2) : "" }));
      keys.appendChild(chip);
    });
    root.appendChild(keys);

    const status = document.createElement("div");
    status.className = "ae-status";
    status.setAttribute("aria-live", "polite");
    status.textContent = statusText(model);
    root.appendChild(status);
  }

  draw();
  for (const name of ["tokens", "weights", "selected", "locked", "head", "top_k", "title"]) {
    model.on(`change:${name}`, draw);
  }
}

export default { render };
"""

_CSS = r"""
.attention-explorer { font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px;
  padding: 6px 0; color: var(--jp-ui-font-color1, #222); }
.attention-explorer .ae-title { font-weight: 600; margin-bottom: 4px; }
.attention-explorer .ae-head { margin-bottom: 6px; }
.attention-explorer .ae-row { display: flex; flex-wrap: wrap; gap: 4px; align-items: center;
  margin: 4px 0; }
.attention-explorer .ae-label { width: 3.5em; color: #777; font-size: 12px; }
.attention-explorer .ae-token { padding: 3px 7px; border: 1px solid #9ab; border-radius: 4px;
  cursor: pointer; user-select: none; background: #f4f7fa; color: #222; }
.attention-explorer .ae-token:hover, .attention-explorer .ae-token:focus { background: #fff3b0; }
.attention-explorer .ae-token.ae-selected { background: #ffe066; border-color: #c90; }
.attention-explorer .ae-token.ae-locked { outline: 2px solid #c90; font-weight: 600; }
.attention-explorer .ae-key { display: inline-flex; flex-direction: column; align-items: center;
  padding: 3px 7px; border-radius: 4px; border: 1px solid #ccd; color: #111;
  background: rgba(31, 119, 180, calc(var(--ae-strength, 0) * 0.85)); }
.attention-explorer .ae-weight { font-size: 11px; min-height: 1em; }
.attention-explorer .ae-status { margin-top: 6px; font-size: 13px;
  font-family: var(--jp-code-font-family, monospace); }
"""


def _synced_index(proposal: dict, low: float, high: float, rule: str) -> int:
    """The proposed value of a synced index if low <= value < high, else a TraitError: RULE, got V
    (the browser can set these traits too, so they are checked on every change)."""
    value = proposal["value"]
    if not low <= value < high:
        raise traitlets.TraitError(f"{rule}, got {value}")
    return value


class AttentionExplorer(anywidget.AnyWidget):
    """Choose (hover, click) a query token and see where it attends.

    tokens: n strings; weights: (n, n) or (num_heads, n, n), rows summing to 1.
    Synced state: `selected` (query index, -1 for none), `locked` (a click locked it), `head`.
    """

    _esm = _ESM
    _css = _CSS

    tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    weights = traitlets.List().tag(sync=True)  # (num_heads, n, n) as nested lists
    head = traitlets.Int(0).tag(sync=True)
    selected = traitlets.Int(-1).tag(sync=True)
    locked = traitlets.Bool(False).tag(sync=True)
    top_k = traitlets.Int(3).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    empty_text = traitlets.Unicode(NO_SELECTION_TEXT).tag(sync=True)

    def __init__(
        self,
        tokens: Sequence[str],
        weights: object,
        *,
        selected: int | str | None = None,
        head: int = 0,
        top_k: int = 3,
        title: str = "",
    ) -> None:
        tokens, w = as_attention_weights(tokens, weights)
        check_positive_int(top_k, "top_k")
        # Rounded so the notebook stays small; the weights shown carry two decimals anyway.
        nested = [[[round(float(v), 4) for v in row] for row in mat] for mat in w]
        super().__init__(tokens=tokens, weights=nested, top_k=top_k, title=str(title))
        self.head = head
        if selected is not None:
            self.select(selected, lock=True)

    # -- validation of the synced state (also applies to changes made by the browser) ----------

    @traitlets.validate("selected")
    def _check_selected(self, proposal):
        n = len(self.tokens)
        why = f"selected must be a query index in 0..{n - 1} (or -1 for none)"
        return _synced_index(proposal, -1, n, why)

    @traitlets.validate("head")
    def _check_head(self, proposal):
        h = len(self.weights)
        return _synced_index(proposal, 0, max(1, h), f"head must be in 0..{h - 1} (num_heads={h})")

    @traitlets.validate("top_k")
    def _check_top_k(self, proposal):
        return _synced_index(proposal, 1, math.inf, "top_k must be positive")

    # -- what Python can ask and do --------------------------------------------------------------

    @property
    def num_heads(self) -> int:
        return len(self.weights)

    def index_of(self, token: int | str) -> int:
        """The query index of `token` (its first occurrence), or `token` itself if an int."""
        if isinstance(token, bool):
            raise TypeError("token must be an int index or a token string, got bool")
        if isinstance(token, int):
            if not 0 <= token < len(self.tokens):
                raise ValueError(
                    f"token index {token} is out of range for {len(self.tokens)} tokens"
                )
            return token
        if isinstance(token, str):
            if token not in self.tokens:
                raise ValueError(f"token {token!r} is not in the sentence {self.tokens}")
            return self.tokens.index(token)
        raise TypeError(f"token must be an int index or a token string, got {type(token).__name__}")

    def select(self, token: int | str, *, lock: bool = True) -> AttentionExplorer:
        """Choose a query, as a click (lock=True) or a hover (lock=False) does."""
        index = self.index_of(token)
        with self.hold_sync():
            self.selected = index
            self.locked = bool(lock)
        return self

    def clear(self) -> AttentionExplorer:
        """No query chosen, nothing locked."""
        with self.hold_sync():
            self.locked = False
            self.selected = -1
        return self

    def row(self, index: int | str | None = None) -> list[float]:
        """The weights of one query over the keys (default: the selected query)."""
        index = self.selected if index is None else self.index_of(index)
        if index < 0:
            raise ValueError("no query is selected; pass a token or call select() first")
        return list(self.weights[self.head][index])

    def top_keys(
        self, index: int | str | None = None, k: int | None = None
    ) -> list[tuple[str, float]]:
        """The keys the query attends to most, largest first: [(token, weight), ...]."""
        return top_keys_of(self.row(index), self.tokens, k or self.top_k)

    def status_text(self) -> str:
        """The text of the widget's status line (`.ae-status`), computed as the browser does."""
        if self.selected < 0:
            return self.empty_text
        keys = self.top_keys()
        listed = ", ".join(f"{t} {w:.2f}" for t, w in keys) or "nothing (every key is masked)"
        head = f"head {self.head}, " if self.num_heads > 1 else ""
        lock = " (locked)" if self.locked else ""
        token = self.tokens[self.selected]
        return f'{head}query {self.selected} "{token}"{lock} attends to: {listed}'

    def __repr__(self) -> str:
        # Shown as the cell's text output where the widget cannot render; no addresses, so it is
        # the same on every run.
        n, heads = len(self.tokens), self.num_heads
        plural = "s" if heads != 1 else ""
        return f"AttentionExplorer({n} tokens, {heads} head{plural}): {self.status_text()}"


def attention_dropdown(tokens: Sequence[str], weights: object, *, head: int = 0):
    """The ipywidgets-only fallback: a Dropdown of query tokens and a bar chart of its weights.

    Returns an `ipywidgets.VBox`; its `.children[0]` is the Dropdown (value = query index).
    """
    import ipywidgets
    import matplotlib.pyplot as plt

    from .viz import query_weights_bar

    tokens, w = as_attention_weights(tokens, weights)
    if not is_int(head) or not 0 <= head < w.shape[0]:
        raise ValueError(f"head must be an int in 0..{w.shape[0] - 1}, got {head!r}")
    dropdown = ipywidgets.Dropdown(
        options=[(f"{i}: {t}", i) for i, t in enumerate(tokens)], value=0, description="query"
    )
    output = ipywidgets.Output()

    def show(_change=None) -> None:
        output.clear_output(wait=True)
        with output:
            query_weights_bar(w[head, dropdown.value], tokens, query_label=tokens[dropdown.value])
            plt.show()

    dropdown.observe(show, names="value")
    show()
    return ipywidgets.VBox([dropdown, output])


# --------------------------------------------------------------------------------------------
# Lesson 11: the explorer driven by a trained GPT
# --------------------------------------------------------------------------------------------


__all__ += ["ModelExplorer"]


import html  # noqa: E402  (lesson 11's explorer: below the lesson-02 explorer, on purpose)

import ipywidgets  # noqa: E402


class ModelExplorer(ipywidgets.VBox):
    """A trained character-level GPT, opened up: type text, choose a layer and a head, see
    where each character attends; click a head's button to ablate it and see the loss change.

        explorer = ModelExplorer(model, vocabulary, "ROMEO:\\nBut soft")
        explorer                           # shows the widget (text box, layer, head, heads grid)
        explorer.select(0, 2)              # what choosing layer 0, head 2 does, from Python
        explorer.toggle(0, 2)              # what a click on head L0H2's button does
        explorer.loss, explorer.clean_loss, explorer.status_text()

    `vocabulary` is the string of the model's characters in id order (load_shakespeare_gpt's).
    The loss is the mean next-character cross-entropy (nats) on the text, with the ablated
    heads' outputs set to zero (course_lib.inspection.ablate_heads). Where widgets cannot
    render, the cell shows `status_text()`.
    """

    def __init__(self, model, vocabulary: str, text: str, layer: int = 0, head: int = 0):
        from .gpt import GPT

        if not isinstance(model, GPT):
            raise TypeError(f"model must be a course_lib GPT, got {type(model).__name__}")
        if not isinstance(vocabulary, str) or len(vocabulary) != model.config.vocab_size:
            raise ValueError(
                f"vocabulary must be a string of the model's {model.config.vocab_size} "
                f"characters in id order, got {vocabulary!r:.40}"
            )
        self.model, self.vocabulary = model, vocabulary
        self.ablated: set[tuple[int, int]] = set()
        c = model.config
        self._text = ipywidgets.Text(description="text", continuous_update=False)
        self._layer = ipywidgets.Dropdown(options=list(range(c.num_layers)), description="layer")
        self._head = ipywidgets.Dropdown(options=list(range(c.num_heads)), description="head")
        self._buttons = {
            (lay, h): ipywidgets.ToggleButton(
                description=f"L{lay}H{h}", tooltip="ablate this head (zero its output)"
            )
            for lay in range(c.num_layers)
            for h in range(c.num_heads)
        }
        grid = ipywidgets.GridBox(
            list(self._buttons.values()),
            layout=ipywidgets.Layout(grid_template_columns=f"repeat({c.num_heads}, 80px)"),
        )
        self._status = ipywidgets.HTML()
        self._picture = ipywidgets.HTML()
        super().__init__(
            [
                self._text,
                ipywidgets.HBox([self._layer, self._head]),
                ipywidgets.Label("click a head to ablate it:"),
                grid,
                self._status,
                self._picture,
            ]
        )
        self._busy = True
        self.set_text(text)
        self.select(layer, head)
        self._busy = False
        self._text.observe(lambda change: self.set_text(change["new"]), names="value")
        self._layer.observe(lambda _: self._refresh(), names="value")
        self._head.observe(lambda _: self._refresh(), names="value")
        for key, button in self._buttons.items():
            button.observe(lambda change, key=key: self._clicked(key, change["new"]), names="value")
        self._refresh()

    # -- what Python can ask and do --------------------------------------------------------------

    def set_text(self, text: str) -> ModelExplorer:
        """Show another text (at least 2 characters, at most block_size, all in the vocabulary)."""
        if not isinstance(text, str) or not 2 <= len(text) <= self.model.config.block_size:
            raise ValueError(
                f"text must be a string of 2 to {self.model.config.block_size} characters, "
                f"got {text!r:.40}"
            )
        unknown = sorted(set(text) - set(self.vocabulary))
        if unknown:
            raise ValueError(f"text has characters the model does not know: {unknown}")
        self.ids = torch.tensor([[self.vocabulary.index(ch) for ch in text]])
        self._busy, was = True, self._busy
        self._text.value = text
        self._busy = was
        self._compute()
        return self

    @property
    def text(self) -> str:
        return self._text.value

    @property
    def layer(self) -> int:
        return self._layer.value

    @property
    def head(self) -> int:
        return self._head.value

    def select(self, layer: int, head: int) -> ModelExplorer:
        """Show head `head` of layer `layer`, as the two dropdowns do."""
        from .inspection import _check_head

        _check_head(self.model, layer, head)
        self._busy, was = True, self._busy
        self._layer.value, self._head.value = layer, head
        self._busy = was
        self._refresh()
        return self

    def toggle(self, layer: int, head: int) -> ModelExplorer:
        """Ablate the head, or restore it if it was ablated: what a click on its button does."""
        from .inspection import _check_head

        _check_head(self.model, layer, head)
        self._buttons[(layer, head)].value = (layer, head) not in self.ablated
        return self

    def pattern(self) -> Tensor:
        """The shown head's attention (seq, seq) on the text, with the ablated heads ablated."""
        return self._patterns[self.layer, 0, self.head]

    def status_text(self) -> str:
        ablated = ", ".join(f"L{lay}H{h}" for lay, h in sorted(self.ablated)) or "none"
        change = self.loss - self.clean_loss
        last = self.pattern()[-1]
        top = int(last.argmax())
        return (
            f"{len(self.text)} characters; layer {self.layer}, head {self.head}: the last "
            f"character {self.text[-1]!r} attends most to {self.text[top]!r} (position {top}, "
            f"weight {float(last[top]):.2f}). Ablated heads: {ablated}; loss {self.loss:.3f} "
            f"nats (without ablation {self.clean_loss:.3f}, change {change:+.3f})"
        )

    def __repr__(self) -> str:
        return f"ModelExplorer: {self.status_text()}"

    # -- internals ---------------------------------------------------------------------------------

    def _clicked(self, key: tuple[int, int], on: bool) -> None:
        (self.ablated.add if on else self.ablated.discard)(key)
        self._compute()
        self._refresh()

    def _compute(self) -> None:
        from .inspection import ablate_heads, attention_patterns, next_token_losses

        self.clean_loss = next_token_losses(self.model, self.ids).mean().item()
        with ablate_heads(self.model, sorted(self.ablated)):
            self.loss = next_token_losses(self.model, self.ids).mean().item()
            self._patterns = attention_patterns(self.model, self.ids)

    def _refresh(self) -> None:
        if self._busy:
            return
        self._status.value = f"<code>{html.escape(self.status_text())}</code>"
        self._picture.value = self._pattern_html()

    def _pattern_html(self) -> str:
        """The shown head's attention as an HTML grid (query rows, key columns): plain HTML, so
        it renders offline in any frontend and draws nothing outside the widget."""
        chars = [html.escape(repr(ch)[1:-1]) for ch in self.text]
        weights = self.pattern().tolist()
        cell = "width:9px;height:9px;padding:0;"
        head = "".join(
            f'<th style="{cell}font-size:7px;font-weight:normal">{ch}</th>' for ch in chars
        )
        rows = [f"<tr><th></th>{head}</tr>"]
        for ch, row in zip(chars, weights, strict=True):
            cells = "".join(
                f'<td style="{cell}background:rgba(31,119,180,{w:.2f})" title="{w:.2f}"></td>'
                for w in row
            )
            rows.append(f'<tr><th style="font-size:7px;font-weight:normal">{ch}</th>{cells}</tr>')
        caption = (
            f"<caption>layer {self.layer}, head {self.head}: row = query, column = key "
            "(darker = more attention)</caption>"
        )
        return f'<table style="border-collapse:collapse">{caption}{"".join(rows)}</table>'
