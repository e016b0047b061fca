"""ex11.ablate_head: the change in next-token loss when one head is switched off (zeroed)."""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from ...core import Case, register
from ..common import randint
from ._models import (
    LESSON,
    MODE_NO_FINALLY,
    ONE_COLUMN,
    ModelTask,
    circuit_heads,
    circuit_spec,
    model_case,
    raising_case,
    repeated,
)

_MEAN = (  # over the batch and positions, or each sequence's own over its positions
    "you replaced the head's output by its mean (mean ablation); this task asks for "
    "ZERO ablation: set the head's slice to 0"
)
# "no_effect" comes before "rows": zeroing rows can also change nothing on a drawn case, and this
# hint (which names the columns) is then true for both.
MISTAKES = {
    "in_place": (
        "the change in loss is right, but the head's weights are still zero after your "
        "function returned: restore them (keep a copy and copy it back in a `finally`), "
        "or zero the head's slice of out_proj's input with a pre-hook you remove. A copy is "
        "w[:, cols].clone(): w[:, cols] alone is a view of the weight, zeroed with it"
    ),
    "sign": (
        "the change is the ablated loss MINUS the clean loss (positive when the model "
        "needs the head)"
    ),
    "no_effect": (
        "your ablation changed nothing: the loss with the head zeroed equals the clean loss. "
        "A forward pre-hook must RETURN the changed input (`return (z,)`; returning None "
        "keeps the original), the hook must be registered for the ablated run only, and head "
        "h is the slice h*d_head .. (h+1)*d_head - 1 of out_proj's input (its weight's "
        "COLUMNS, not its rows), with this model's d_head = d_model // num_heads (not the "
        "lesson's 32)"
    ),
    "rows": (
        "you zeroed ROWS of out_proj.weight (or that slice of self_attn's OUTPUT), which "
        "removes output features of every head; head h is the COLUMNS h*d_head .. "
        "(h+1)*d_head - 1 (the slice of out_proj's input that the head wrote)"
    ),
    "next_head": "the wrong head: head h is the slice h*d_head .. (h+1)*d_head - 1",
    "one_column": ONE_COLUMN,
    "queries": (
        "zeroing the head's queries makes its attention uniform, it does not switch the "
        "head off; zero what the head writes, its slice of out_proj's input"
    ),
    "unshifted": (
        "the loss is the next-token loss: the logits at position t predict ids[:, t + 1] "
        "(logits[:, :-1] against ids[:, 1:])"
    ),
    "misaligned": (
        "logits and targets are misaligned: the logits at position t predict the NEXT "
        "token, so logits[:, :-1] go with ids[:, 1:] (not logits[:, 1:] with "
        "ids[:, :-1])"
    ),
    "own_token": (
        "the targets are the NEXT tokens: logits[:, :-1] go with ids[:, 1:]; against "
        "ids[:, :-1] each position is scored on its own token"
    ),
    "flattened_first": (
        "you flattened before shifting: logits.flatten(0, 1)[:-1] against ids.flatten()[1:] "
        "scores the last position of each sequence on the first token of the NEXT sequence; "
        "shift each sequence first, logits[:, :-1] against ids[:, 1:], then flatten"
    ),
    "classes_last": (
        "F.cross_entropy takes the classes on dim 1: (N, vocab) logits against (N,) targets, "
        "so flatten the batch and the positions, logits[:, :-1].flatten(0, 1) against "
        "ids[:, 1:].flatten() (or move vocab to dim 1 with .transpose(1, 2))"
    ),
    "summed": (
        "the loss is the MEAN cross-entropy over the batch and the positions, not the "
        "sum (F.cross_entropy's default reduction)"
    ),
    "lesson_layer": (
        "you ablated the head in layer 0 whatever `layer` is (the lesson's "
        "model.layers[0]): hook model.layers[layer].self_attn.out_proj"
    ),
    "layer_ignored": (
        "you ablated head `head` in every layer: ablate it in layer `layer` only "
        "(model.layers[layer].self_attn.out_proj)"
    ),
    "positions": (
        "you zeroed sequence POSITIONS: z[:, a:b] slices dim 1 of (batch, seq, num_heads * "
        "d_head), the positions; head h's features are the LAST dim, z[..., h*d_head:(h+1)*d_head]"
    ),
    "mean": _MEAN,
    "mean_positions": _MEAN,  # each sequence's own mean over its positions, mean(1)
    "row0": (
        "your loss reads row 0 of the batch only: it is the loss over the whole batch, not row "
        "0, the mean over every row and position, logits[:, :-1] against ids[:, 1:] (flattened)"
    ),
    "mode_no_finally": MODE_NO_FINALLY,
    "eval_left": (
        "you called model.eval() and left the model in eval mode: a model given in "
        "training mode must come back in training mode; torch.no_grad() is enough here "
        "(or restore the mode with model.train(was_training))"
    ),
    "frozen": (
        "the change in loss is right, but the weights' requires_grad is off after your function "
        "returned (model.requires_grad_(False), or weight.requires_grad = False, to allow the "
        "in-place zeroing): the model can no longer be trained. Zero and restore the columns "
        "under `with torch.no_grad():` instead, which allows in-place edits, and leave "
        "requires_grad alone"
    ),
    "new_parameter": (
        "the change in loss is right, but out_proj.weight is a new nn.Parameter after your "
        "function returned (out_proj.weight = nn.Parameter(saved)): an optimizer made before "
        "still holds the old weight, whose columns stay zero. Restore the values in place, "
        "weight.copy_(saved) under `with torch.no_grad():`"
    ),
    "stale": (
        "the clean loss came from an earlier call: a cache kept between calls (keyed by the "
        "model, by ids.shape, or made once, a mutable default such as cache={} or a global) "
        "serves the same model called again with other ids; compute the clean loss on every "
        "call, with these ids"
    ),
}

_FIRST = weakref.WeakKeyDictionary()  # "stale": the clean loss of a model's first call


def wrong_ablation(model, ids, layer, head, *, mistake):
    """The ablated loss minus the clean one, with the named mistake."""
    was = model.training
    if mistake in ("eval_left", "mode_no_finally"):
        model.eval()

    def loss():
        with torch.no_grad():
            logits = model(ids)
        if mistake == "unshifted":  # logits against their own position's ids
            logits, targets = logits, ids
        elif mistake == "misaligned":
            logits, targets = logits[:, 1:], ids[:, :-1]
        elif mistake == "own_token":  # both sliced [:, :-1]: each position's own token
            logits, targets = logits[:, :-1], ids[:, :-1]
        elif mistake == "flattened_first":  # shifted across the sequences' boundaries
            logits, targets = logits.flatten(0, 1)[None, :-1], ids.flatten()[None, 1:]
        elif mistake == "row0":  # the first sequence of the batch only
            logits, targets = logits[:1, :-1], ids[:1, 1:]
        else:
            logits, targets = logits[:, :-1], ids[:, 1:]
        if mistake == "classes_last":  # (batch, seq - 1, vocab) read as (N, C, d)
            return F.cross_entropy(logits, targets)
        reduction = "sum" if mistake == "summed" else "mean"
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction=reduction)

    layers = model.layers if mistake == "layer_ignored" else [model.layers[layer]]
    if mistake == "lesson_layer":  # the lesson's model.layers[0], copied
        layers = [model.layers[0]]
    attns = [lay.self_attn for lay in layers]
    d_head = attns[0].d_model // attns[0].num_heads
    which = (head + 1) % attns[0].num_heads if mistake == "next_head" else head
    part = (
        slice(which, which + 1)
        if mistake == "one_column"
        else slice(which * d_head, (which + 1) * d_head)
    )
    clean = _FIRST.setdefault(model, loss()) if mistake == "stale" else loss()
    if mistake in ("mean", "mean_positions", "positions"):  # the head's mean, or positions zeroed

        def replace(module, args):
            z = args[0].clone()
            if mistake == "positions":  # the slice on dim 1, the positions
                z[:, part] = 0.0
            else:
                dims = (1,) if mistake == "mean_positions" else (0, 1)
                z[..., part] = z[..., part].mean(dim=dims, keepdim=True)
            return (z,)

        handle = attns[0].out_proj.register_forward_pre_hook(replace)
        try:
            return (loss() - clean).item()
        finally:
            handle.remove()
    weights = [a.q_proj.weight if mistake == "queries" else a.out_proj.weight for a in attns]
    saved = [weight.detach().clone() for weight in weights]
    if mistake == "frozen":  # switched off to allow the in-place zeroing, never switched back
        model.requires_grad_(False)
    with torch.no_grad():
        for weight in weights:
            if mistake in ("rows", "queries"):
                weight[part, :] = 0.0
            else:
                weight[:, part] = 0.0
    ablated = clean if mistake == "no_effect" else loss()
    if mistake != "in_place":
        with torch.no_grad():
            for attn, weight, copy in zip(attns, weights, saved, strict=True):
                if mistake == "new_parameter":  # the values back in a new object, not in place
                    attn.out_proj.weight = torch.nn.Parameter(copy)
                else:
                    weight.copy_(copy)
    if mistake == "mode_no_finally":  # put back after the forwards, so never when one raises
        model.train(was)
    return (clean - ablated if mistake == "sign" else ablated - clean).item()


@register
class AblateHead(ModelTask):
    id = "ex11.ablate_head"
    lesson = f"{LESSON}, section 5 'Ablation'"
    reference = "course_lib.inspection.ablate_head"
    forbidden = ("course_lib.inspection.ablate_heads", "course_lib.inspection.ablation_effects")
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_ablation)
    atol = 1e-4

    def cases(self, gen):
        spec = circuit_spec(gen)
        prev, ind = circuit_heads(spec["seed"])
        ids = repeated(gen, 4, 10, 24)
        heads = ((ind, "its induction head"), (prev, "its previous-token head"))
        cases = [
            model_case(spec, ids, layer, head, note=f", layer={layer}, head={head} ({what})")
            for (layer, head), what in (*heads, ((1, (ind[1] + 1) % 4), "another head"))
        ]
        for seed, layer, head, shape, options in (
            (5, 1, 2, (3, 9), {"block": 9}),  # the ids fill block_size: a check with >= raises
            (6, 0, 0, (2, 12), {}),
            (16, 1, 1, (2, 8), {"training": True}),
        ):
            spec = {"kind": "random", "seed": seed, **options}
            ids = randint(gen, 13, *shape)
            cases.append(model_case(spec, ids, layer, head, note=f", layer={layer}, head={head}"))
        # first, drawn last (the cases above stay as they were): only row 0 repeats, so the
        # induction head's effect on row 0 is far from the batch's mean (a loss of row 0 only
        # gets its hint); the circuit's two heads have different numbers, so that ablating the
        # head in every layer (layer_ignored) does not also remove the previous-token head
        circuit = circuit_spec(gen)
        while len({head for _, head in circuit_heads(circuit["seed"])}) == 1:
            circuit = circuit_spec(gen)
        ids = torch.cat([repeated(gen, 1, 10, 24), randint(gen, 24, 1, 20)])
        ind = circuit_heads(circuit["seed"])[1]
        note = f", layer={ind[0]}, head={ind[1]} (its induction head; only row 0 repeats itself)"
        cases = [model_case(circuit, ids, *ind, note=note), *cases]
        # drawn after those (which stay as they were): the first random GPT's case again, with
        # other ids of the same shape after a first call on the same model (a clean loss kept
        # between calls, by the model or by ids.shape, is stale); then ids longer than
        # block_size, whose forward raises: a model in training mode switched to eval, a hook,
        # or zeroed weights put back only after a forward that succeeded stay changed
        first = cases[4]
        twice = Case(
            f"{first.description}, called a second time with other ids",
            (randint(gen, 13, 3, 9), *first.args[1:]),
            data={"model": first.data["model"], "earlier": [first.args]},
        )
        return [*cases, twice, raising_case(gen, "ids", lambda ids: (1, 1))]
