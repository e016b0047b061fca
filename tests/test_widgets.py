"""course_lib.widgets: the explorer's synced state, its validation, its text, its JS contract."""

import ipywidgets
import pytest
import torch
import traitlets

from course_lib.widgets import AttentionExplorer, as_attention_weights, attention_dropdown

TOKENS = ["the", "cat", "sat", "down"]
WEIGHTS = torch.tensor(
    [
        [0.10, 0.70, 0.15, 0.05],
        [0.25, 0.25, 0.40, 0.10],
        [0.05, 0.60, 0.05, 0.30],
        [0.00, 0.00, 0.00, 0.00],  # a fully masked query
    ]
)


def explorer(**kwargs):
    return AttentionExplorer(TOKENS, WEIGHTS, **kwargs)


def test_initial_state_and_synced_traits():
    e = explorer()
    assert e.selected == -1 and e.locked is False and e.head == 0 and e.num_heads == 1
    assert e.tokens == TOKENS
    assert len(e.weights) == 1 and len(e.weights[0]) == 4
    synced = {name for name in e.traits(sync=True)}
    assert {"tokens", "weights", "selected", "locked", "head", "top_k"} <= synced
    assert e.status_text().startswith("Hover over a query token")


def test_select_by_token_and_index_locks_or_previews():
    e = explorer()
    e.select("cat")
    assert (e.selected, e.locked) == (1, True)
    e.select(2, lock=False)
    assert (e.selected, e.locked) == (2, False)
    e.clear()
    assert (e.selected, e.locked) == (-1, False)


def test_selected_in_the_constructor():
    e = explorer(selected="sat")
    assert (e.selected, e.locked) == (2, True)


def test_top_keys_and_status_follow_the_selection():
    e = explorer(selected="the")
    assert [t for t, _ in e.top_keys()] == ["cat", "sat", "the"]
    assert e.status_text() == 'query 0 "the" (locked) attends to: cat 0.70, sat 0.15, the 0.10'
    e.select("sat", lock=False)
    assert e.status_text() == 'query 2 "sat" attends to: cat 0.60, down 0.30, the 0.05'
    assert e.top_keys(k=1) == [("cat", 0.6)]
    assert e.top_keys("cat", k=2) == [("sat", 0.4), ("the", 0.25)]  # ties: leftmost first


def test_fully_masked_query_attends_to_nothing():
    e = explorer(selected="down")
    assert e.top_keys() == []
    assert "nothing (every key is masked)" in e.status_text()


def test_repr_is_short_deterministic_and_has_no_address():
    e = explorer(selected="cat")
    text = e._repr_mimebundle_()[0]["text/plain"]
    assert text == repr(e) == repr(explorer(selected="cat"))
    assert text.startswith("AttentionExplorer(4 tokens, 1 head): query 1")
    assert "0x" not in text


def test_observers_see_changes_made_from_python():
    e = explorer()
    seen = []
    e.observe(lambda change: seen.append(change["new"]), names="selected")
    e.select("sat")
    e.clear()
    assert seen == [2, -1]


def test_multi_head_weights_and_head_switch():
    weights = torch.stack([WEIGHTS, WEIGHTS.flip(-1)])  # (2 heads, 4, 4)
    e = AttentionExplorer(TOKENS, weights, selected="the")
    assert e.num_heads == 2
    assert e.top_keys()[0] == ("cat", 0.7)
    e.head = 1
    assert e.top_keys()[0] == ("sat", 0.7)  # flipped row: [0.05, 0.15, 0.70, 0.10]
    assert e.status_text().startswith("head 1, query 0")
    assert "2 heads" in repr(e)


def test_state_validation_rejects_out_of_range_values():
    e = explorer()
    with pytest.raises(traitlets.TraitError, match="selected must be a query index"):
        e.selected = 4
    with pytest.raises(traitlets.TraitError, match="head must be in 0..0"):
        e.head = 1
    with pytest.raises(traitlets.TraitError, match="top_k must be positive"):
        e.top_k = 0
    with pytest.raises(ValueError, match="'dog' is not in the sentence"):
        e.select("dog")
    with pytest.raises(ValueError, match="token index 9 is out of range"):
        e.select(9)
    with pytest.raises(ValueError, match="no query is selected"):
        e.top_keys()


@pytest.mark.parametrize(
    "tokens, weights, error, match",
    [
        (TOKENS[:3], WEIGHTS, ValueError, r"n = len\(tokens\) = 3, got shape \(4, 4\)"),
        (TOKENS, WEIGHTS[:, :3], ValueError, r"got shape \(4, 3\)"),
        (TOKENS, torch.ones(2, 2, 4, 4) / 4, ValueError, r"got shape \(2, 2, 4, 4\)"),
        (TOKENS, torch.ones(4) / 4, ValueError, r"got shape \(4,\)"),
        ("the cat sat down", WEIGHTS, TypeError, "tokens must be a list of strings"),
        ([], torch.ones(0, 0), ValueError, "tokens is empty"),
        (["the", 1, "sat", "down"], WEIGHTS, TypeError, "tokens must all be strings"),
        (TOKENS, "weights", TypeError, "weights must be a tensor"),
        (TOKENS, -WEIGHTS, ValueError, "non-negative"),
        (TOKENS, torch.full((4, 4), float("nan")), ValueError, "finite"),
        (
            TOKENS,
            torch.randn(4, 4, generator=torch.Generator().manual_seed(0)),
            ValueError,
            "sum to 1|non-negative",
        ),
        (TOKENS, torch.ones(4, 4), ValueError, "row 0 of head 0 sums to 4.000"),
    ],
)
def test_bad_inputs_are_rejected_with_clear_messages(tokens, weights, error, match):
    with pytest.raises(error, match=match):
        AttentionExplorer(tokens, weights)


def test_bad_top_k_and_head():
    with pytest.raises(ValueError, match="top_k must be a positive int"):
        explorer(top_k=0)
    with pytest.raises(traitlets.TraitError, match="head must be in"):
        explorer(head=3)


def test_weights_are_accepted_as_nested_lists_and_float64():
    tokens, w = as_attention_weights(TOKENS, WEIGHTS.double().tolist())
    assert w.shape == (1, 4, 4) and w.dtype == torch.float64
    assert AttentionExplorer(TOKENS, WEIGHTS.tolist()).weights == explorer().weights


def test_javascript_follows_the_dom_contract():
    esm = (
        AttentionExplorer._esm
        if isinstance(AttentionExplorer._esm, str)
        else str(AttentionExplorer._esm)
    )
    for needle in (
        '"attention-explorer"',
        '"ae-token"',
        "dataset.index",
        '"ae-status"',
        '"ae-key"',
        "mouseenter",
        "click",
        'model.set("selected"',
        "save_changes",
        "export default",
    ):
        assert needle in esm, needle
    assert "http" not in esm  # nothing is fetched from a CDN


def test_dropdown_fallback_follows_the_choice():
    box = attention_dropdown(TOKENS, WEIGHTS)
    assert isinstance(box, ipywidgets.VBox)
    dropdown, output = box.children
    assert dropdown.options[1] == ("1: cat", 1)
    dropdown.value = 2
    assert dropdown.value == 2
    with pytest.raises(ValueError, match="head must be an int in 0..0"):
        attention_dropdown(TOKENS, WEIGHTS, head=1)


# ------------------------------------------------------- the JavaScript, run in node on a fake DOM

FAKE_DOM = r"""
class El {
  constructor(tag) { this.tag = tag; this.children = []; this.dataset = {}; this.listeners = {};
    this.className = ""; this.textContent = ""; this.style = { setProperty() {} };
    const el = this;
    this.classList = { add(c) { el.className += " " + c; } }; }
  appendChild(c) { this.children.push(c); return c; }
  replaceChildren() { this.children = []; }
  setAttribute() {}
  addEventListener(type, fn) { (this.listeners[type] ||= []).push(fn); }
  fire(type) {
    for (const fn of this.listeners[type] || []) fn({ key: "Enter", preventDefault() {} });
  }
  find(cls) {
    const out = [];
    const walk = (e) => {
      if ((" " + e.className + " ").includes(" " + cls + " ")) out.push(e);
      e.children.forEach(walk);
    };
    walk(this);
    return out;
  }
}
globalThis.document = { createElement: (tag) => new El(tag) };
const state = JSON.parse(process.argv[2]);
const handlers = {};
const model = { get: (k) => state[k], set: (k, v) => { state[k] = v; },
  save_changes() { for (const fn of handlers.all || []) fn(); },
  on(event, fn) { (handlers.all ||= []).push(fn); } };
const { default: widget } = await import(process.argv[3]);
const el = new El("div");
widget.render({ model, el });
const root = el.children[0];
const status = () => root.find("ae-status")[0].textContent;
const tokens = () => root.find("ae-token");
const log = { root: root.className, tokens: tokens().map((t) => [t.dataset.index, t.textContent]),
  keys: root.find("ae-key").length, before: status() };
tokens()[1].fire("mouseenter"); log.hover = status(); log.selected_after_hover = state.selected;
tokens()[2].fire("click"); log.click = status(); log.locked = state.locked;
tokens()[0].fire("mouseenter"); log.hover_while_locked = status();
tokens()[2].fire("click"); log.unlocked = state.locked;
console.log(JSON.stringify(log));
"""


@pytest.mark.skipif(__import__("shutil").which("node") is None, reason="node is not installed")
def test_javascript_renders_and_responds_to_hover_and_click(tmp_path):
    import json
    import subprocess

    e = explorer()
    (tmp_path / "widget.mjs").write_text(e._esm)
    (tmp_path / "harness.mjs").write_text(FAKE_DOM)
    state = {
        name: getattr(e, name)
        for name in (
            "tokens",
            "weights",
            "head",
            "selected",
            "locked",
            "top_k",
            "title",
            "empty_text",
        )
    }
    run = subprocess.run(
        ["node", str(tmp_path / "harness.mjs"), json.dumps(state), str(tmp_path / "widget.mjs")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    log = json.loads(run.stdout)
    assert log["root"] == "attention-explorer"
    assert log["tokens"] == [[str(i), t] for i, t in enumerate(TOKENS)]
    assert log["keys"] == 4
    assert log["before"] == e.status_text()
    # the browser's status line says exactly what Python's status_text says for the same state
    assert log["hover"] == explorer().select("cat", lock=False).status_text()
    assert log["selected_after_hover"] == 1
    assert log["click"] == explorer().select("sat").status_text()
    assert log["locked"] is True
    assert log["hover_while_locked"] == log["click"]  # a lock ignores hovering
    assert log["unlocked"] is False
