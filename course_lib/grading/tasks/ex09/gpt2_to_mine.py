"""ex09.gpt2_to_mine: the key map that moves GPT-2's weights, as Hugging Face stores them, into
the learner's GPT (the names of exercise 09's capstone). The cases are random state dicts in
Hugging Face's layout (`hf_gpt2_state`: no `transformers` at grading time); the result is
compared key set first (the missing and unexpected names listed), then tensor by tensor, exactly.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from ...core import Case, GradingError, Task, changed_message, register

MISTAKES = {
    "not_transposed": "GPT-2's Conv1D stores its weight as (in_features, out_features), the "
    "transpose of nn.Linear's (out_features, in_features): take .t() of every c_attn, "
    "c_proj and c_fc weight",
    "split_wrong_axis": "c_attn's weight is (d, 3 * d) with W_Q, W_K, W_V side by side in its "
    "COLUMNS: split it along dim 1 into three (d, d) blocks, then transpose each (or "
    "transpose first and split along dim 0)",
    "split_rows": "c_attn's weight is (d, 3 * d), Conv1D's (in, out), not nn.Linear's "
    "(3 * d, d): W_Q, W_K, W_V sit side by side in its COLUMNS, so split along dim 1, then "
    "transpose each block",
    "bias_not_split": "c_attn's bias (3 * d,) holds the three biases one after the other: "
    "split it into three (d,) pieces for q_proj, k_proj and v_proj, like the weight",
    "masks_kept": "attn.bias and attn.masked_bias are not weights: they are each layer's "
    "causal mask, saved as a buffer; drop them (your attention builds its own mask)",
    "prefix_kept": "the keys may start with 'transformer.' (GPT2LMHeadModel's state dict): "
    "remove that prefix first, key.removeprefix('transformer.')",
    "no_lm_head": "your GPT's lm_head.weight is the token embedding (tied): add "
    "out['lm_head.weight'] = the tensor of wte.weight, whether or not the input has an "
    "lm_head.weight",
    "course_position_name": "in your GPT the learned positions are a plain nn.Embedding, so "
    "the name is position_embedding.weight (course_lib's GPT wraps it: "
    "position_embedding.embedding.weight)",
    "ln_f_kept": "GPT-2's final LayerNorm ln_f is your GPT's `norm`: ln_f.weight -> "
    "norm.weight, ln_f.bias -> norm.bias",
    "suffix_drops_c_attn_bias": "q_proj, k_proj and v_proj have no bias: a test such as "
    "key.endswith('attn.bias'), meant for the causal-mask buffer h.{i}.attn.bias, also "
    "matches h.{i}.attn.c_attn.bias; compare the whole name after the layer number "
    "(rest == 'attn.bias')",
    "qkv_order": "c_attn's three blocks come in the order query, key, value (W_Q | W_K | W_V): "
    "the first block is q_proj's, the second k_proj's, the third v_proj's, for the weight and "
    "the bias alike (q, k, v = ...chunk(3, ...)); your blocks went to the projections in "
    "another order",
    "qkv_reshaped": "c_attn's weight (d, 3 * d) holds W_Q | W_K | W_V side by side in its "
    "COLUMNS; reshape(3, d, d) cuts it in memory order, by rows, and mixes the three: split it "
    "along dim 1, weight.split(d, dim=1), then transpose each block",
    "layers_as_text": "GPT-2 small has 12 layers, h.0 to h.11: read a layer's number as a whole "
    "integer, int(key.split('.')[1]); sorted as text h.10 comes before h.2, a one-digit pattern "
    "reads h.10 as h.1, and startswith('h.1') matches h.10 and h.11 too",
    "c_attn_not_transposed": "c_attn is a Conv1D too: its three (d, d) blocks are stored as "
    "(in_features, out_features) like every Conv1D weight; after splitting it along dim 1, "
    "transpose each block (.t()) for q_proj, k_proj and v_proj",
    "embeddings_transposed": "wte and wpe are not Conv1Ds: they are embedding tables, (vocab, "
    "d) and (positions, d), one row per token or position, the layout of nn.Embedding too; copy "
    "them as they are and transpose only the c_attn, c_proj and c_fc weights (a test such as "
    "value.dim() == 2 also picks up the embeddings)",
    "reshaped_not_transposed": "reshape (or view) to the (out_features, in_features) shape is "
    "not a transpose: it keeps the numbers in memory order and only cuts them otherwise (a "
    "square c_proj weight comes back unchanged, the others scrambled); transpose every c_attn, "
    "c_proj and c_fc weight with .t()",
}

# Hugging Face's name inside block i -> the learner's, and whether the weight is a Conv1D's
_BLOCK = {
    "ln_1": ("norm1", False),
    "ln_2": ("norm2", False),
    "attn.c_proj": ("self_attn.out_proj", True),
    "mlp.c_fc": ("feed_forward.linear1", True),
    "mlp.c_proj": ("feed_forward.linear2", True),
}


def gpt2_to_mine(hf_state):
    """The task's reference: course_lib's key map (course_lib.gpt2.gpt2_to_course), with the
    learned positions under the learner's name, position_embedding.weight (a plain
    nn.Embedding; course_lib's GPT wraps it in a module that adds positions)."""
    from ....gpt2 import gpt2_to_course

    out = {}
    for key, value in gpt2_to_course(hf_state).items():
        if key == "position_embedding.embedding.weight":
            key = "position_embedding.weight"
        out[key] = value
    return out


def wrong_gpt2_to_mine(hf_state, *, mistake=""):
    """The key map written as a learner would, with one named mistake ("" for none)."""
    if mistake == "prefix_kept":
        sd = dict(hf_state)
    else:
        sd = {key.removeprefix("transformer."): value for key, value in hf_state.items()}
    if mistake == "embeddings_transposed":  # every 2-D tensor flipped, as if all were Conv1D
        sd |= {key: sd[key].t() for key in ("wte.weight", "wpe.weight")}
    positions = "embedding." if mistake == "course_position_name" else ""
    out = {
        "token_embedding.weight": sd["wte.weight"],
        f"position_embedding.{positions}weight": sd["wpe.weight"],
    }
    final = "ln_f" if mistake == "ln_f_kept" else "norm"
    out[f"{final}.weight"], out[f"{final}.bias"] = sd["ln_f.weight"], sd["ln_f.bias"]
    layers = 1 + max(int(key.split(".")[1]) for key in sd if key.startswith("h."))
    source = sorted(range(layers), key=str) if mistake == "layers_as_text" else range(layers)
    for i, j in enumerate(source):  # as text, h.10 comes after h.1: layers.2 gets h.10
        h, mine = f"h.{j}.", f"layers.{i}."
        for theirs, (ours, conv) in _BLOCK.items():
            weight = sd[f"{h}{theirs}.weight"]
            flip = conv and mistake != "not_transposed"
            out[f"{mine}{ours}.weight"] = weight.t() if flip else weight
            if flip and mistake == "reshaped_not_transposed":  # (in, out) read as (out, in)
                out[f"{mine}{ours}.weight"] = weight.reshape(weight.shape[::-1])
            out[f"{mine}{ours}.bias"] = sd[f"{h}{theirs}.bias"]
        weight, bias = sd[f"{h}attn.c_attn.weight"], sd[f"{h}attn.c_attn.bias"]  # (d, 3d), (3d,)
        parts = weight.chunk(3, dim=0 if mistake in ("split_wrong_axis", "split_rows") else 1)
        parts = weight.reshape(3, -1, weight.shape[0]) if mistake == "qkv_reshaped" else parts
        if mistake == "reshaped_not_transposed":  # (d, 3d) read as (3d, d), then cut by rows
            parts = weight.reshape(weight.shape[::-1]).chunk(3, dim=0)
        flat = mistake in (
            "not_transposed",
            "c_attn_not_transposed",
            "qkv_reshaped",
            "split_rows",
            "reshaped_not_transposed",
        )
        weights = parts if flat else [p.t() for p in parts]  # (out, in)
        biases = [bias] * 3 if mistake == "bias_not_split" else bias.chunk(3)
        order = "kqv" if mistake == "qkv_order" else "qkv"
        for name, w, b in zip(order, weights, biases, strict=True):
            out[f"{mine}self_attn.{name}_proj.weight"] = w
            if mistake != "suffix_drops_c_attn_bias":
                out[f"{mine}self_attn.{name}_proj.bias"] = b
        if mistake == "masks_kept":
            for buffer in ("bias", "masked_bias"):
                if f"{h}attn.{buffer}" in sd:
                    out[f"{mine}attn.{buffer}"] = sd[f"{h}attn.{buffer}"]
    if mistake != "no_lm_head":
        out["lm_head.weight"] = sd["wte.weight"]
    return out


def hf_gpt2_state(gen, *, layers, d, vocab, positions, prefix, lm_head, masks, dtype):
    """A random GPT-2 state dict in Hugging Face's layout (GPT2LMHeadModel's with prefix and
    lm_head, GPT2Model's without), in its order; lm_head.weight is wte.weight (tied)."""

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)

    def layer(name, n_in, n_out):  # a Conv1D's (in, out) weight, or (n_in 0) a LayerNorm's
        weight = randn(n_in, n_out) if n_in else 1 + 0.1 * randn(n_out)
        state[f"{name}.weight"], state[f"{name}.bias"] = weight, randn(n_out)

    p = "transformer." if prefix else ""
    state = {f"{p}wte.weight": randn(vocab, d), f"{p}wpe.weight": randn(positions, d)}
    for i in range(layers):
        h = f"{p}h.{i}."
        layer(f"{h}ln_1", 0, d)
        if masks:
            causal = torch.ones(positions, positions, dtype=torch.bool).tril()
            state[f"{h}attn.bias"] = causal.view(1, 1, positions, positions)
            state[f"{h}attn.masked_bias"] = torch.tensor(-1e4, dtype=dtype)
        layer(f"{h}attn.c_attn", d, 3 * d)
        layer(f"{h}attn.c_proj", d, d)
        layer(f"{h}ln_2", 0, d)
        layer(f"{h}mlp.c_fc", d, 4 * d)
        layer(f"{h}mlp.c_proj", 4 * d, d)
    layer(f"{p}ln_f", 0, d)
    if lm_head:
        state["lm_head.weight"] = state[f"{p}wte.weight"]
    return state


def _fresh_copy(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A copy of a state dict with its own tensors (tied tensors stay one tensor)."""
    memo: dict[int, Tensor] = {}
    return {k: memo.setdefault(id(v), v.clone()) for k, v in state.items()}


def _call_on_copy(obj, state: dict[str, Tensor]):
    """obj on a fresh copy of `state`, which must come back as it was (keys and tensors)."""
    given = _fresh_copy(state)
    out = obj(given)
    if list(given) != list(state) or any(not torch.equal(given[k], v) for k, v in state.items()):
        raise GradingError(changed_message(["hf_state"]))
    return out


def _names(keys) -> str:
    keys = sorted(keys)
    shown = ", ".join(repr(k) for k in keys[:4])
    return shown + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def _permuted(got, want, layer):
    """Whether layer `layer`'s q, k, v projections hold the right three tensors (weights or
    biases) in another order."""
    for kind in ("weight", "bias"):
        keys = [f"layers.{layer}.self_attn.{n}_proj.{kind}" for n in "qkv"]
        if not all(isinstance(got.get(k), Tensor) and got[k].shape == want[k].shape for k in keys):
            continue
        rights = [want[k] for k in keys]
        found = [
            next((i for i, w in enumerate(rights) if torch.equal(got[k], w)), None) for k in keys
        ]
        if sorted(i for i in found if i is not None) == [0, 1, 2] and found != [0, 1, 2]:
            return True
    return False


@register
class Gpt2ToMineTask(Task):
    id = "ex09.gpt2_to_mine"
    lesson = "lesson 09, section 'GPT-2's weights in our GPT' (course_lib.gpt2's key map)"
    reference = "course_lib.grading.tasks.ex09.gpt2_to_mine.gpt2_to_mine"
    forbidden = tuple(
        "course_lib.gpt2.gpt2_to_course course_lib.gpt2.gpt_from_gpt2 course_lib.gpt2.load_gpt2 "
        "course_lib.gpt2.gpt2_config course_lib.gpt.GPT.from_gpt2".split()
    )

    def cases(self, gen):
        def case(description, layers, d, vocab, positions, prefix, lm_head, masks, dtype):
            sizes = {"layers": layers, "d": d, "vocab": vocab, "positions": positions}
            flags = {"prefix": prefix, "lm_head": lm_head, "masks": masks, "dtype": dtype}
            return Case(description, data={"state": hf_gpt2_state(gen, **sizes, **flags)})

        f32, f64 = torch.float32, torch.float64
        # fmt: off
        return [  # layers, d, vocab, positions; prefix, lm_head, masks; dtype
            case("GPT2LMHeadModel's layout: keys with the 'transformer.' prefix, lm_head.weight "
                 "and the mask buffers attn.bias and attn.masked_bias; 1 layer, d 8, vocab 11, "
                 "6 positions", 1, 8, 11, 6, True, True, True, f32),
            case("GPT2Model's layout: no prefix, no lm_head.weight, with the mask buffers; "
                 "2 layers, d 12, vocab 13, 7 positions", 2, 12, 13, 7, False, False, True, f32),
            case("as saved by recent versions of transformers: prefix and lm_head.weight, no "
                 "mask buffers; 2 layers, d 16, vocab 9, 5 positions",
                 2, 16, 9, 5, True, True, False, f32),
            case("float64, no prefix, no lm_head.weight, no mask buffers; 1 layer, d 8, "
                 "vocab 10, 4 positions", 1, 8, 10, 4, False, False, False, f64),
            case("GPT-2 small's 12 layers, h.0 to h.11 (layers 10 and 11 have two digits); "
                 "d 4, vocab 5, 3 positions, no prefix", 12, 4, 5, 3, False, False, True, f32),
        ]
        # fmt: on

    def call(self, obj, case):
        state = case.data["state"]
        try:
            return _call_on_copy(obj, state)
        except GradingError:
            raise
        except Exception as error:
            if isinstance(error, NotImplementedError):
                raise
            layers = {re.sub(r"^(transformer\.)?h\.(\d+)\..*", r"\2", k) for k in state}
            count = sum(k.isdigit() for k in layers)
            asked = re.search(r"h\.(\d+)\.", str(error)) if isinstance(error, KeyError) else None
            if asked and int(asked[1]) >= count:  # range(12), GPT-2 small's layers, hard-coded
                raise GradingError(
                    f"your code raised KeyError: {error}. Hint: this state dict has {count} "
                    f"layer{'s' * (count > 1)} (h.0{f' to h.{count - 1}' * (count > 1)}): count "
                    "the layers from its keys, not from GPT-2 small's 12 (the check's models "
                    "have 1 or 2)"
                ) from None
            if "transformer.wte.weight" not in state:
                raise
            try:  # the same map on the keys without their prefix
                obj(_fresh_copy({k.removeprefix("transformer."): v for k, v in state.items()}))
            except Exception:  # noqa: BLE001  (it fails there too: not the prefix)
                raise error from None
            hint = MISTAKES["prefix_kept"]
            message = f"your code raised {type(error).__name__}: {error}. Hint: {hint}"
            raise GradingError(message) from None

    def compare(self, got, want, case):
        if not isinstance(got, dict) or "__repr__" in got:
            kind = got.get("__repr__") if isinstance(got, dict) else type(got).__name__
            return f"gpt2_to_mine should return a dict of tensors, got {kind}"
        missing, unexpected = set(want) - set(got), set(got) - set(want)
        if missing or unexpected:
            parts = []
            if missing:
                parts.append(f"missing {_names(missing)}")
            if unexpected:
                parts.append(f"unexpected {_names(unexpected)}")
            return "your state dict's keys differ from your GPT's: " + "; ".join(parts)
        for key, w in want.items():
            g = got[key]
            if not isinstance(g, Tensor):
                return f"your {key!r} should be a tensor, got {type(g).__name__}"
            if g.shape != w.shape:
                return (
                    f"your {key!r} has shape ({', '.join(map(str, g.shape))}), expected "
                    f"({', '.join(map(str, w.shape))})"
                )
            if g.dtype != w.dtype:
                return f"your {key!r} has dtype {str(g.dtype)[6:]}, expected {str(w.dtype)[6:]}"
            if not torch.equal(g, w):
                return f"your {key!r} holds other numbers than GPT-2's weight that belongs there"
        return None

    def diagnose(self, got, want, case):
        """A hint from the keys alone, when the learner's map differs from every listed
        mistake in other ways too."""
        if not isinstance(got, dict) or "__repr__" in got:
            return None
        unexpected = set(got) - set(want)
        if any(key.startswith("transformer.") for key in unexpected):
            return MISTAKES["prefix_kept"]
        if any(key.split(".")[-2:] in (["attn", "bias"], ["attn", "masked_bias"]) for key in got):
            return MISTAKES["masks_kept"]
        if "position_embedding.embedding.weight" in unexpected:
            return MISTAKES["course_position_name"]
        if "lm_head.weight" not in got:
            return MISTAKES["no_lm_head"]
        for key, w in want.items():  # a Conv1D weight left as (in, out)
            g = got.get(key)
            if isinstance(g, Tensor) and w.dim() == 2 and key.startswith("layers."):
                if g.shape == w.t().shape and torch.equal(g, w.t()) and not torch.equal(g, w):
                    return MISTAKES["not_transposed"]
        missing = set(want) - set(got)  # only layers 10 and 11: a one-digit pattern skipped them
        if missing and all(re.match(r"layers\.\d\d\.", key) for key in missing):
            return MISTAKES["layers_as_text"]
        for key, g in got.items():  # a layer holding another layer's tensor: h.10 read as text
            rest = key.split(".", 2)[-1]
            if key.startswith("layers.") and isinstance(g, Tensor) and key in want:
                others = (w for k, w in want.items() if k != key and k.endswith("." + rest))
                if not torch.equal(g, want[key]) and any(torch.equal(g, w) for w in others):
                    return MISTAKES["layers_as_text"]
        if any(
            _permuted(got, want, layer)
            for layer in {k.split(".")[1] for k in want if k.startswith("layers.")}
        ):
            return MISTAKES["qkv_order"]
        return None

    mistake_table, wrong = MISTAKES, staticmethod(wrong_gpt2_to_mine)
