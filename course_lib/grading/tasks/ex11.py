"""ex11, inside the model: attention patterns with hooks, an induction-head detector, head
ablation, direct logit attribution, and (transfer) activation patching.

Every case names a model, not a tensor: `call` builds it afresh from the case's data (a course
GPT with random, enlarged weights, or a hand-built induction circuit with its two heads at
positions drawn from the seed), runs the learner's function on it, and then checks that the
model is as it was (same outputs, no hook left behind). So the grader knows where the heads
are, and an ablation that is never undone loses points even when the number it returns is
right.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..core import Case, Task, compare_values, register

LESSON = "lesson 11"

# --------------------------------------------------------------------------------------------
# The models the cases run on
# --------------------------------------------------------------------------------------------


def random_gpt(
    seed,
    vocab=13,
    block=16,
    d_model=24,
    heads=3,
    layers=2,
    positions="learned",
    quiet=False,
    norm_eps=1e-5,
    training=False,
):
    """A course GPT whose weights are GPT-2's init plus N(0, 0.3): large enough that every
    head, feed-forward and norm weight changes the logits visibly. quiet=True: everything that
    writes into the residual stream is 1000 times smaller, so the final stream's variance is
    far below the LayerNorm's eps (which then decides the divisor), and the output layer has
    its own weights (not tied to the shrunken embedding). norm_eps: the LayerNorms' eps.
    training=True: the model is returned in training mode (its dropout is 0, so its outputs
    are the same as in eval mode)."""
    from course_lib.gpt import GPT, GPTConfig

    gen = torch.Generator().manual_seed(seed)
    config = GPTConfig(
        vocab_size=vocab,
        block_size=block,
        d_model=d_model,
        num_heads=heads,
        num_layers=layers,
        positions=positions,
        tie_weights=not quiet,
        layer_norm_eps=norm_eps,
    )
    with torch.random.fork_rng():  # the init draws from the global generator: seed it here
        torch.manual_seed(seed)
        model = GPT(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
        if quiet:
            writers = [model.token_embedding.weight]
            if model.position_embedding is not None:
                writers.append(model.position_embedding.embedding.weight)
            for layer in model.layers:
                writers += [layer.self_attn.out_proj.weight, layer.feed_forward.linear2.weight]
            for weight in writers:
                weight.mul_(1e-3)
    return model.train(training)


def circuit_heads(seed, layers=2, heads=4):
    """Where the circuit of this seed puts its previous-token head and its induction head."""
    gen = torch.Generator().manual_seed(1000 + seed)
    first = int(torch.randint(0, layers - 1, (1,), generator=gen))
    second = int(torch.randint(first + 1, layers, (1,), generator=gen))
    prev = (first, int(torch.randint(0, heads, (1,), generator=gen)))
    return prev, (second, int(torch.randint(0, heads, (1,), generator=gen)))


def circuit(seed, layers=2, heads=4):
    """A hand-built induction circuit (course_lib.inspection.induction_circuit) with its
    previous-token head and its induction head at positions drawn from the seed."""
    from course_lib.inspection import induction_circuit

    prev, ind = circuit_heads(seed, layers, heads)
    return induction_circuit(24, 24, prev, ind, num_layers=layers, num_heads=heads, seed=seed)


def build(spec: dict):
    kind, options = spec["kind"], {k: v for k, v in spec.items() if k != "kind"}
    return circuit(**options) if kind == "circuit" else random_gpt(**options)


def describe(spec: dict) -> str:
    if spec.get("quiet"):
        eps = spec.get("norm_eps", 1e-5)
        return (
            f"a random GPT ({spec.get('layers', 2)} layers x {spec.get('heads', 3)} heads) "
            f"whose final norm has eps={eps:g} and whose final residual stream is tiny: its "
            "variance is far below that eps, so eps matters"
        )
    if spec.get("training"):
        return (
            f"a random GPT ({spec.get('layers', 2)} layers x {spec.get('heads', 3)} heads) "
            "in TRAINING mode (model.train(), dropout 0)"
        )
    if spec["kind"] == "circuit":
        return (
            f"a hand-built induction circuit ({spec.get('layers', 2)} layers x "
            f"{spec.get('heads', 4)} heads, its heads at hidden positions)"
        )
    return (
        f"a random GPT ({spec.get('layers', 2)} layers x {spec.get('heads', 3)} heads, "
        f"d_model={spec.get('d_model', 24)}, {spec.get('positions', 'learned')} positions)"
    )


def repeated(gen, batch, period, vocab):
    """(batch, 2 * period): distinct random tokens, then the same again."""
    first = torch.stack([torch.randperm(vocab, generator=gen)[:period] for _ in range(batch)])
    return torch.cat([first, first], dim=1)


def _hooks_left(model) -> bool:
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def _snapshot(model) -> tuple:
    """What a function may change on a model besides its weights: every module's mode, and
    each layer's own attention recording: its flag, and whether it holds stored weights (a
    layer keeps `.attention` only while its flag is on, so hooks leave it as it was)."""
    modes = tuple(m.training for m in model.modules())
    recording = tuple(
        (getattr(layer, "record_attention", None), getattr(layer, "attention", None) is None)
        for layer in model.layers
    )
    return modes, recording


# what a changed model looks like -> what the learner must do about it
CHANGES = {
    "hook": (
        "a hook is still registered",
        "keep the handles that register_forward_hook returns and call handle.remove() on "
        "each, in a `finally`",
    ),
    "hook_after_error": (
        "a hook is still registered after the forward raised an error (the ids were longer "
        "than block_size)",
        "put the forward in `try:` and every handle.remove() in its `finally:`, so the hooks "
        "go even when the forward fails; let the error propagate",
    ),
    "mode": (
        "its training mode changed (model.training, or a sub-module's, is not what it was)",
        "do not call model.eval() or model.train(), or put the model back in the mode it was "
        "in (`was = model.training` ... `model.train(was)`); torch.no_grad() is all you need",
    ),
    "recording": (
        "its layers' own attention recording changed (a layer's record_attention flag, or "
        "the .attention weights it stores while the flag is on, are not what they were)",
        "read the weights with hooks, as the task asks, and leave each layer's "
        "record_attention flag as it was",
    ),
    "outputs": (
        "its outputs differ from those before the call",
        "change activations with a hook that you remove in a `finally` (or restore the "
        "weights you changed), and never leave a hook registered",
    ),
}


CHANGED_MODEL = (
    "your function left the model changed after it returned: {what}. Whoever calls it next "
    "gets a different model; {fix}"
)


class ModelTask(Task):
    """A task whose function takes a model first: `call` builds the case's model, runs the
    function, and returns (result, what the model looks like afterwards).

    A case with data["fails"] gives ids that the model refuses (longer than block_size): the
    forward raises, and only the model afterwards is compared (raising that ValueError or
    reporting it are both fine; a hook left behind is not; any other error is the learner's)."""

    def call(self, obj, case):
        model = build(case.data["model"])
        probe = case.data.get("probe", case.args[0])
        with torch.no_grad():
            before = model(probe)
        snapshot = _snapshot(model)
        fails = case.data.get("fails", False)
        if fails:
            try:
                obj(model, *case.args, **case.kwargs)
            except ValueError:  # the forward's error (ids too long), expected here
                pass
            result = None
        else:
            result = obj(model, *case.args, **case.kwargs)
        if _hooks_left(model):
            state = "hook_after_error" if fails else "hook"
        elif _snapshot(model)[0] != snapshot[0]:
            state = "mode"
        elif _snapshot(model)[1] != snapshot[1]:
            state = "recording"
        else:
            with torch.no_grad():
                after = model(probe)
            same = torch.allclose(after, before, rtol=1e-5, atol=1e-5)
            state = "unchanged" if same else "outputs"
        if isinstance(result, torch.Tensor):
            result = result.detach()
        return result, state

    def compare(self, got, want, case):
        if not (isinstance(got, tuple) and len(got) == 2):
            return "your function did not return a result"
        if got[1] != want[1]:
            what, fix = CHANGES.get(got[1], (str(got[1]), ""))
            return CHANGED_MODEL.format(what=what, fix=fix)
        if case.data.get("fails"):
            return None
        return self.compare_result(got[0], want[0])

    def compare_result(self, got, want):
        return compare_values(got, want)


def _close(got, want, atol=1e-4, rtol=1e-4):
    """compare_values with a looser float tolerance: the same sum computed in another order."""
    if isinstance(want, float):
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return (
                f"your result should be a Python float (use .item() on a one-element tensor), "
                f"got {type(got).__name__}"
            )
        if math.isclose(got, want, rel_tol=rtol, abs_tol=atol):
            return None
        return f"your result is {got:.6g}, expected {want:.6g}"
    if isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor):
        if got.shape == want.shape and got.dtype == want.dtype:
            if torch.allclose(got, want, rtol=rtol, atol=atol):
                return None
    return compare_values(got, want)


# --------------------------------------------------------------------------------------------
# ex11.attention_patterns
# --------------------------------------------------------------------------------------------


def _patterns_variant(model, ids, *, mistake=""):
    patterns, handles = [], []
    if mistake == "eval_left":
        model.eval()

    def ask(module, args, kwargs):
        return args, {**kwargs, "need_weights": mistake != "weights_not_asked"}

    def keep(module, args, output):
        patterns.append(output[1])

    if mistake == "record_flag":  # the layers' own recording instead of hooks, left on
        for layer in model.layers:
            layer.record_attention = True
        with torch.no_grad():
            model(ids)
        return torch.stack([layer.attention for layer in model.layers])
    layers = model.layers[-1:] if mistake == "last_layer_only" else model.layers
    try:
        for layer in layers:
            handles.append(layer.self_attn.register_forward_pre_hook(ask, with_kwargs=True))
            handles.append(layer.self_attn.register_forward_hook(keep))
        with torch.no_grad():
            model(ids)
        if mistake == "no_finally":  # removed after the forward, so never when it raises
            for handle in handles:
                handle.remove()
    finally:
        if mistake not in ("hooks_left", "no_finally"):
            for handle in handles:
                handle.remove()
    if mistake == "batch_first":
        return torch.stack(patterns, dim=1)
    if mistake == "heads_averaged":
        return torch.stack(patterns).mean(2)
    if mistake == "transposed":
        return torch.stack(patterns).transpose(-2, -1)
    if mistake == "list":
        return patterns
    return torch.stack(patterns)


def _patterns_mistake(mistake):
    return lambda model, ids: _patterns_variant(model, ids, mistake=mistake)


@register
class AttentionPatterns(ModelTask):
    id = "ex11.attention_patterns"
    lesson = f"{LESSON}, section 1 'Reading activations without changing code: hooks'"
    reference = "course_lib.inspection.attention_patterns"
    forbidden = ("course_lib.blocks.record_attention",)

    def cases(self, gen):
        specs = [
            ({"kind": "random", "seed": 1}, (2, 7)),
            ({"kind": "random", "seed": 2, "layers": 3, "heads": 2, "positions": "rope"}, (3, 5)),
            ({"kind": "random", "seed": 3, "layers": 1, "heads": 4, "d_model": 16}, (1, 9)),
            ({"kind": "circuit", "seed": int(torch.randint(0, 10**6, (1,), generator=gen))}, None),
        ]
        cases = []
        for spec, shape in specs:
            if shape is None:
                ids = repeated(gen, 2, 8, 24)
            else:
                ids = torch.randint(0, 13, shape, generator=gen)
            cases.append(
                Case(f"{describe(spec)}, ids {tuple(ids.shape)}", (ids,), data={"model": spec})
            )
        spec = {"kind": "random", "seed": 14, "training": True}
        ids = torch.randint(0, 13, (2, 6), generator=gen)
        cases.append(
            Case(f"{describe(spec)}, ids {tuple(ids.shape)}", (ids,), data={"model": spec})
        )
        spec = {"kind": "random", "seed": 15}
        ids = torch.randint(0, 13, (2, 20), generator=gen)
        cases.append(
            Case(
                f"{describe(spec)}, block_size 16, ids (2, 20): the forward raises, and no "
                "hook may remain on the model afterwards",
                (ids,),
                data={"model": spec, "probe": ids[:, :16], "fails": True},
            )
        )
        return cases

    def mistakes(self):
        return [
            (
                _patterns_mistake("no_finally"),
                "your hooks stay on the model when the forward raises: handle.remove() runs "
                "only after a forward that succeeded; register the hooks and run the forward "
                "inside `try:`, and remove every handle in `finally:`",
            ),
            (
                _patterns_mistake("hooks_left"),
                "your hooks are still registered after the call: keep the handles that "
                "register_forward_hook returns and call handle.remove() on each, in a `finally`",
            ),
            (
                _patterns_mistake("record_flag"),
                "you switched on the layers' own recording (layer.record_attention = True) and "
                "read layer.attention: the task asks for hooks, and the model must be left as it "
                "was (the flags off)",
            ),
            (
                _patterns_mistake("eval_left"),
                "you called model.eval() and left the model in eval mode: a model given in "
                "training mode must come back in training mode; torch.no_grad() is enough here "
                "(or restore the mode with model.train(was_training))",
            ),
            (
                _patterns_mistake("transposed"),
                "the query and key axes are swapped: [l, b, h, i, j] is how much QUERY i "
                "attends to KEY j (each row i sums to 1, and the future j > i is 0); self_attn's "
                "weights are already in that order, do not transpose them",
            ),
            (
                _patterns_mistake("batch_first"),
                "the layers must be the FIRST axis: (num_layers, batch, num_heads, seq, seq); "
                "stack the per-layer patterns along dim 0",
            ),
            (
                _patterns_mistake("heads_averaged"),
                "keep every head: each layer's pattern is (batch, num_heads, seq, seq), not an "
                "average over the heads",
            ),
            (
                _patterns_mistake("last_layer_only"),
                "every layer's pattern is needed, one hook per layer in model.layers",
            ),
            (
                _patterns_mistake("weights_not_asked"),
                "the layers call self_attn with need_weights=False, so its second output is "
                "None: a forward pre-hook registered with with_kwargs=True must set "
                "kwargs['need_weights'] = True",
            ),
            (
                _patterns_mistake("list"),
                "return one tensor (torch.stack of the per-layer patterns), not a list",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex11.induction_scores
# --------------------------------------------------------------------------------------------


def _induction_variant(model, ids, *, mistake=""):
    if ids.shape[1] % 2:
        raise ValueError("ids must be a sequence repeated twice")
    period = ids.shape[1] // 2
    patterns = _patterns_variant(model, ids)  # (layers, batch, heads, 2T, 2T)
    offset = {"duplicate": period, "two_after": period - 2}.get(mistake, period - 1)
    stripe = patterns.diagonal(offset=-offset, dim1=-2, dim2=-1)  # (layers, batch, heads, k)
    queries = stripe[..., -period:]  # the queries T .. 2T - 1 (or as far as the stripe goes)
    if mistake == "all_queries":
        queries = patterns.diagonal(offset=-offset, dim1=-2, dim2=-1)
    if mistake == "over_heads":
        return queries.mean(dim=(2, 3))  # (layers, batch)
    if mistake == "over_batch_only":
        return queries.mean(dim=1)  # (layers, heads, T)
    if mistake == "sum":
        return queries.sum(dim=(1, 3))
    if mistake == "max":
        return queries.amax(dim=(1, 3))
    if mistake == "over_t_minus_1":  # the queries' sum divided by T - 1 instead of T
        return queries.sum(dim=3).mean(dim=1) / (period - 1)
    if mistake == "keys_axis":  # all of each query row, not the induction key
        rows = patterns[..., period:, :]
        return rows.mean(dim=(1, 3, 4))
    return queries.mean(dim=(1, 3))


def _induction_mistake(mistake):
    return lambda model, ids: _induction_variant(model, ids, mistake=mistake)


@register
class InductionScores(ModelTask):
    id = "ex11.induction_scores"
    lesson = f"{LESSON}, section 2 'Heads with a job'"
    reference = "course_lib.inspection.induction_scores"
    depends_on = ("attention_patterns",)
    forbidden = ("course_lib.inspection.attention_patterns",)

    def cases(self, gen):
        cases = []
        for layers, heads, batch, period in ((2, 4, 4, 10), (3, 4, 2, 7), (2, 5, 3, 11)):
            spec = {
                "kind": "circuit",
                "seed": int(torch.randint(0, 10**6, (1,), generator=gen)),
                "layers": layers,
                "heads": heads,
            }
            ids = repeated(gen, batch, period, 24)
            cases.append(
                Case(
                    f"{describe(spec)}, ids {tuple(ids.shape)}: random tokens, period {period}",
                    (ids,),
                    data={"model": spec},
                )
            )
        spec = {"kind": "random", "seed": 4, "positions": "rope"}
        ids = repeated(gen, 3, 6, 13)
        cases.append(
            Case(
                f"{describe(spec)}, ids {tuple(ids.shape)}, period 6", (ids,), data={"model": spec}
            )
        )
        odd = torch.randint(0, 13, (2, 9), generator=gen)
        cases.append(
            Case(
                f"{describe(spec)}, ids (2, 9): an odd length is no repeated sequence, so a "
                "ValueError",
                (odd,),
                data={"model": spec, "probe": odd},
                raises=ValueError,
            )
        )
        return cases

    def compare_result(self, got, want):
        return _close(got, want, atol=1e-5)

    def mistakes(self):
        axis = (
            "average over the batch and the queries (dims 1 and 3 of the (num_layers, batch, "
            "num_heads, queries) stripe), keeping one score per layer and head: shape "
            "(num_layers, num_heads)"
        )
        return [
            (
                _induction_mistake("duplicate"),
                "off by one: key i - T is the earlier copy of the SAME token (a duplicate-token "
                "head); an induction head attends to the token AFTER it, key i - T + 1",
            ),
            (
                _induction_mistake("two_after"),
                "off by one: the token after the earlier copy of query i's token is at "
                "i - T + 1, not i - T + 2",
            ),
            (
                _induction_mistake("all_queries"),
                "only the queries of the second copy (i = T .. 2T - 1) have an earlier copy to "
                "look back to; the first copy's queries must not be averaged in",
            ),
            (_induction_mistake("over_heads"), f"scores averaged over the wrong axis: {axis}"),
            (
                _induction_mistake("over_batch_only"),
                f"scores averaged over the wrong axis: {axis}",
            ),
            (
                _induction_mistake("keys_axis"),
                "you averaged over the keys of each query row (which always sums to 1); the "
                "score is the weight on ONE key per query, i - T + 1",
            ),
            (_induction_mistake("sum"), "a score is a mean (between 0 and 1), not a sum"),
            (
                _induction_mistake("max"),
                "a score is the MEAN weight on key i - T + 1 over the batch and the queries, "
                "not its maximum",
            ),
            (
                _induction_mistake("over_t_minus_1"),
                "the second copy has T queries (i = T .. 2T - 1), not T - 1: average over all "
                "T of them (.mean(), not a sum divided by T - 1)",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex11.ablate_head
# --------------------------------------------------------------------------------------------


def _loss(model, ids, shifted="next", reduction="mean"):
    """The next-token loss; shifted="none": logits against their own position's ids,
    "back": logits[:, 1:] against ids[:, :-1]."""
    with torch.no_grad():
        logits = model(ids)
    if shifted == "none":
        logits, targets = logits, ids
    elif shifted == "back":
        logits, targets = logits[:, 1:], ids[:, :-1]
    else:
        logits, targets = logits[:, :-1], ids[:, 1:]
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction=reduction)


def _ablate_variant(model, ids, layer, head, *, mistake=""):
    if mistake == "eval_left":
        model.eval()
    shifted = {"unshifted": "none", "misaligned": "back"}.get(mistake, "next")
    reduction = "sum" if mistake == "summed" else "mean"
    if mistake == "layer_ignored":  # head `head` of every layer
        attns = [lay.self_attn for lay in model.layers]
    else:
        attns = [model.layers[layer].self_attn]
    d_head = attns[0].d_model // attns[0].num_heads
    which = head + 1 if mistake == "next_head" else head
    part = slice(which * d_head, (which + 1) * d_head)
    clean = _loss(model, ids, shifted, reduction)
    if mistake == "mean":  # mean ablation: the head's mean output over these ids

        def replace(module, args):
            z = args[0].clone()
            z[..., part] = z[..., part].mean(dim=(0, 1))
            return (z,)

        handle = attns[0].out_proj.register_forward_pre_hook(replace)
        try:
            ablated = _loss(model, ids, shifted, reduction)
        finally:
            handle.remove()
        return (ablated - clean).item()
    weights = [a.q_proj.weight if mistake == "queries" else a.out_proj.weight for a in attns]
    saved = [weight.detach().clone() for weight in weights]
    with torch.no_grad():
        for weight in weights:
            if mistake in ("rows", "queries"):
                weight[part, :] = 0.0
            else:
                weight[:, part] = 0.0
    ablated = _loss(model, ids, shifted, reduction)
    if mistake != "in_place":
        with torch.no_grad():
            for weight, copy in zip(weights, saved, strict=True):
                weight.copy_(copy)
    if mistake == "sign":
        return (clean - ablated).item()
    return (ablated - clean).item()


def _ablate_mistake(mistake):
    return lambda model, ids, layer, head: _ablate_variant(model, ids, layer, head, mistake=mistake)


@register
class AblateHead(ModelTask):
    id = "ex11.ablate_head"
    lesson = f"{LESSON}, section 5 'Ablation'"
    reference = "course_lib.inspection.ablate_head"
    forbidden = ("course_lib.inspection.ablate_heads", "course_lib.inspection.ablation_effects")

    def cases(self, gen):
        cases = []
        seed = int(torch.randint(0, 10**6, (1,), generator=gen))
        spec = {"kind": "circuit", "seed": seed}
        prev, ind = circuit_heads(seed)
        other = (1, (ind[1] + 1) % 4)
        ids = repeated(gen, 4, 10, 24)
        for (layer, head), what in (
            (ind, "its induction head"),
            (prev, "its previous-token head"),
            (other, "another head"),
        ):
            cases.append(
                Case(
                    f"{describe(spec)}, ids {tuple(ids.shape)}, layer={layer}, head={head} "
                    f"({what})",
                    (ids, layer, head),
                    data={"model": spec},
                )
            )
        for seed, layer, head, shape, training in (
            (5, 1, 2, (3, 9), False),
            (6, 0, 0, (2, 12), False),
            (16, 1, 1, (2, 8), True),
        ):
            spec = {"kind": "random", "seed": seed, "training": training}
            ids = torch.randint(0, 13, shape, generator=gen)
            cases.append(
                Case(
                    f"{describe(spec)}, ids {shape}, layer={layer}, head={head}",
                    (ids, layer, head),
                    data={"model": spec},
                )
            )
        return cases

    def compare_result(self, got, want):
        return _close(got, want)

    def mistakes(self):
        return [
            (
                _ablate_mistake("in_place"),
                "the change in loss is right, but the head's weights are still zero after your "
                "function returned: restore them (keep a copy and copy it back in a `finally`), "
                "or zero the head's slice of out_proj's input with a pre-hook you remove",
            ),
            (
                _ablate_mistake("sign"),
                "the change is the ablated loss MINUS the clean loss (positive when the model "
                "needs the head)",
            ),
            (
                _ablate_mistake("rows"),
                "you zeroed ROWS of out_proj.weight, which removes output features of every "
                "head; head h is the COLUMNS h*d_head .. (h+1)*d_head - 1 (the slice of "
                "out_proj's input that the head wrote)",
            ),
            (
                _ablate_mistake("next_head"),
                "the wrong head: head h is the slice h*d_head .. (h+1)*d_head - 1",
            ),
            (
                _ablate_mistake("queries"),
                "zeroing the head's queries makes its attention uniform, it does not switch the "
                "head off; zero what the head writes, its slice of out_proj's input",
            ),
            (
                _ablate_mistake("unshifted"),
                "the loss is the next-token loss: the logits at position t predict ids[:, t + 1] "
                "(logits[:, :-1] against ids[:, 1:])",
            ),
            (
                _ablate_mistake("misaligned"),
                "logits and targets are misaligned: the logits at position t predict the NEXT "
                "token, so logits[:, :-1] go with ids[:, 1:] (not logits[:, 1:] with "
                "ids[:, :-1])",
            ),
            (
                _ablate_mistake("summed"),
                "the loss is the MEAN cross-entropy over the batch and the positions, not the "
                "sum (F.cross_entropy's default reduction)",
            ),
            (
                _ablate_mistake("layer_ignored"),
                "you ablated head `head` in every layer: ablate it in layer `layer` only "
                "(model.layers[layer].self_attn.out_proj)",
            ),
            (
                _ablate_mistake("mean"),
                "you replaced the head's output by its mean (mean ablation); this task asks for "
                "ZERO ablation: set the head's slice to 0",
            ),
            (
                _ablate_mistake("eval_left"),
                "you called model.eval() and left the model in eval mode: a model given in "
                "training mode must come back in training mode; torch.no_grad() is enough here "
                "(or restore the mode with model.train(was_training))",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex11.direct_logit_attribution
# --------------------------------------------------------------------------------------------


def _attribution_variant(model, ids, *, mistake=""):
    config = model.config
    d_head = config.d_model // config.num_heads
    embed, z, ff, final = [], [], [], []
    handles = [model.layers[0].register_forward_pre_hook(lambda m, a: embed.append(a[0]))]
    for layer in model.layers:
        handles.append(
            layer.self_attn.out_proj.register_forward_pre_hook(lambda m, a: z.append(a[0]))
        )
        handles.append(layer.feed_forward.register_forward_hook(lambda m, a, o: ff.append(o)))
    handles.append(model.norm.register_forward_pre_hook(lambda m, a: final.append(a[0])))
    with torch.no_grad():
        model(ids)
    for handle in handles:
        handle.remove()
    parts = [embed[0]]
    for layer, z_l, ff_l in zip(model.layers, z, ff, strict=True):
        w_o = layer.self_attn.out_proj.weight  # (d_model, num_heads * d_head)
        heads = [
            z_l[..., h * d_head : (h + 1) * d_head]
            @ (
                w_o[h * d_head : (h + 1) * d_head, :]  # rows: the wrong slice, no transpose
                if mistake == "rows"
                else w_o[:, h * d_head : (h + 1) * d_head].T
            )
            for h in range(config.num_heads)
        ]
        parts += [ff_l, *heads] if mistake == "ff_first" else [*heads, ff_l]
    norm = model.norm
    eps = 1e-5 if mistake == "eps_fixed" else norm.eps
    scale = (final[0].var(-1, unbiased=mistake == "unbiased", keepdim=True) + eps).sqrt()
    out = []
    for part in parts:
        if mistake == "full_norm":
            normed = norm(part)
        elif mistake == "no_norm":
            normed = part
        elif mistake == "weight_first":  # gamma before centring: the mean of part * gamma
            weighted = part * norm.weight
            normed = (weighted - weighted.mean(-1, keepdim=True)) / scale
        else:
            centred = part if mistake == "no_centre" else part - part.mean(-1, keepdim=True)
            divided = centred if mistake == "no_scale" else centred / scale
            normed = divided if mistake == "no_weight" else divided * norm.weight
        out.append(model.lm_head(normed))
    with torch.no_grad():
        return torch.stack(out).detach()


def _attribution_mistake(mistake):
    return lambda model, ids: _attribution_variant(model, ids, mistake=mistake)


@register
class DirectLogitAttribution(ModelTask):
    id = "ex11.direct_logit_attribution"
    lesson = f"{LESSON}, section 6 'Direct logit attribution'"
    reference = "course_lib.inspection.direct_logit_attribution"
    forbidden = ("course_lib.inspection.head_inputs", "course_lib.inspection.residual_stream")

    def cases(self, gen):
        cases = []
        for spec, shape in (
            ({"kind": "random", "seed": 7}, (2, 6)),
            ({"kind": "random", "seed": 8, "layers": 3, "heads": 2, "positions": "rope"}, (1, 8)),
            ({"kind": "random", "seed": 9, "layers": 1, "heads": 4, "d_model": 16}, (3, 5)),
            ({"kind": "random", "seed": 13, "quiet": True}, (2, 5)),
            ({"kind": "random", "seed": 17, "quiet": True, "norm_eps": 1e-3}, (2, 5)),
        ):
            ids = torch.randint(0, 13, shape, generator=gen)
            cases.append(Case(f"{describe(spec)}, ids {shape}", (ids,), data={"model": spec}))
        spec = {"kind": "circuit", "seed": int(torch.randint(0, 10**6, (1,), generator=gen))}
        ids = repeated(gen, 2, 8, 24)
        cases.append(Case(f"{describe(spec)}, ids (2, 16)", (ids,), data={"model": spec}))
        return cases

    def compare_result(self, got, want):
        return _close(got, want)

    def mistakes(self):
        return [
            (
                _attribution_mistake("no_scale"),
                "the final norm's scale is missing: the parts must be divided by the norm's "
                "divisor sqrt(var + eps) of the WHOLE final stream (computed once, from the "
                "input of model.norm), or they do not sum to the logits",
            ),
            (
                _attribution_mistake("full_norm"),
                "each part went through the whole LayerNorm, so each was divided by its own "
                "standard deviation: fix the divisor to the one of the whole final stream, "
                "then centre, divide and multiply by norm.weight each part",
            ),
            (
                _attribution_mistake("no_norm"),
                "the final LayerNorm is left out: centre each part, divide by the final "
                "stream's sqrt(var + eps) and multiply by model.norm.weight before lm_head",
            ),
            (
                _attribution_mistake("no_centre"),
                "each part must be centred (minus its mean over d_model) as the LayerNorm "
                "centres the stream",
            ),
            (
                _attribution_mistake("no_weight"),
                "the final norm's weight (gamma, model.norm.weight) is missing",
            ),
            (
                _attribution_mistake("ff_first"),
                "the order of the parts: embeddings, then for each layer its heads 0 .. H-1 and "
                "THEN its feed-forward",
            ),
            (
                _attribution_mistake("eps_fixed"),
                "the final norm's eps is hard-coded: use the model's own, model.norm.eps (a "
                "model may be built with another layer_norm_eps)",
            ),
            (
                _attribution_mistake("unbiased"),
                "the divisor uses the UNBIASED variance (or .std()): LayerNorm divides by "
                "sqrt(var + eps) with the biased variance, var(-1, unbiased=False)",
            ),
            (
                _attribution_mistake("weight_first"),
                "you multiplied by model.norm.weight BEFORE centring: centre each part (minus "
                "its mean over d_model), divide by the divisor, THEN multiply by the weight",
            ),
            (
                _attribution_mistake("rows"),
                "head h writes through the COLUMNS h*d_head .. (h+1)*d_head - 1 of "
                "out_proj.weight, transposed (out_proj computes z @ W.T); you took its rows",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex11.patch_head (transfer: activation patching, which the lesson does not do)
# --------------------------------------------------------------------------------------------


def _patch_variant(model, clean_ids, corrupted_ids, layer, head, *, mistake=""):
    out_proj = model.layers[layer].self_attn.out_proj
    d_head = out_proj.in_features // model.config.num_heads
    which = head + 1 if mistake == "next_head" else head
    part = slice(which * d_head, (which + 1) * d_head)
    saved = []
    handle = out_proj.register_forward_pre_hook(lambda m, a: saved.append(a[0]))
    with torch.no_grad():
        model(corrupted_ids if mistake == "reversed" else clean_ids)
    handle.remove()

    def patch(module, args):
        z = args[0].clone()
        if mistake == "whole_layer":
            return (saved[0],)
        z[..., part] = saved[0][..., part]
        return (z,)

    handle = out_proj.register_forward_pre_hook(patch)
    if mistake == "no_effect":  # the patch removed before the corrupted run
        handle.remove()
    with torch.no_grad():
        logits = model(clean_ids if mistake == "reversed" else corrupted_ids)
    if mistake not in ("hooks_left", "no_effect"):
        handle.remove()
    return logits


def _patch_mistake(mistake):
    return lambda model, clean_ids, corrupted_ids, layer, head: _patch_variant(
        model, clean_ids, corrupted_ids, layer, head, mistake=mistake
    )


@register
class PatchHead(ModelTask):
    id = "ex11.patch_head"
    lesson = f"{LESSON}, sections 1 (hooks that change activations) and 5 (ablation)"
    reference = "course_lib.inspection.patch_head"
    forbidden = ("course_lib.inspection.head_inputs", "course_lib.inspection.ablate_heads")

    def cases(self, gen):
        cases = []
        for spec, shape, layer, head in (
            ({"kind": "random", "seed": 10}, (2, 7), 1, 1),
            ({"kind": "random", "seed": 11, "layers": 3, "positions": "rope"}, (3, 6), 0, 2),
            ({"kind": "random", "seed": 12, "heads": 4, "d_model": 16}, (1, 9), 1, 0),
        ):
            clean = torch.randint(0, 13, shape, generator=gen)
            corrupted = torch.randint(0, 13, shape, generator=gen)
            cases.append(
                Case(
                    f"{describe(spec)}, clean and corrupted ids {shape}, layer={layer}, "
                    f"head={head}",
                    (clean, corrupted, layer, head),
                    data={"model": spec},
                )
            )
        spec = {"kind": "circuit", "seed": int(torch.randint(0, 10**6, (1,), generator=gen))}
        clean = repeated(gen, 2, 8, 24)
        corrupted = torch.cat([clean[:, :8], repeated(gen, 2, 8, 24)[:, :8]], dim=1)
        cases.append(
            Case(
                f"{describe(spec)}: clean = a repeated sequence, corrupted = its first half "
                "followed by other tokens, layer=1, head=3",
                (clean, corrupted, 1, 3),
                data={"model": spec},
            )
        )
        return cases

    def compare_result(self, got, want):
        return _close(got, want)

    def mistakes(self):
        return [
            (
                _patch_mistake("reversed"),
                "the direction is reversed: run the CORRUPTED input, with this head's output "
                "taken from the CLEAN run",
            ),
            (
                _patch_mistake("next_head"),
                "the wrong head: head h is the slice h*d_head .. (h+1)*d_head - 1 of out_proj's "
                "input",
            ),
            (
                _patch_mistake("whole_layer"),
                "you patched every head of the layer; only head `head`'s slice comes from the "
                "clean run, the other heads keep their corrupted outputs",
            ),
            (
                _patch_mistake("hooks_left"),
                "the patching hook is still registered after your function returned: remove it",
            ),
            (
                _patch_mistake("no_effect"),
                "your patch never took effect: the logits equal those of the corrupted input "
                "run unpatched. Was the patching hook removed before the corrupted run, or did "
                "a recording hook still registered overwrite the clean output with the "
                "corrupted one?",
            ),
        ]
