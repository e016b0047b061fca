"""ex11.patch_head (transfer: activation patching, which the lesson does not do): the logits of
the corrupted input with one head's output taken from the clean run."""

from __future__ import annotations

import re
import weakref

import torch

from ...core import Case, GradingError, register
from ..common import randint
from ._models import (
    LESSON,
    NO_FINALLY,
    ONE_COLUMN,
    ModelTask,
    circuit_spec,
    describe,
    raising_case,
    repeated,
)

MISTAKES = {
    "no_finally": NO_FINALLY,  # first: every wrong below leaves its hooks when the forward raises
    "reversed": (
        "the direction is reversed: run the CORRUPTED input, with this head's output "
        "taken from the CLEAN run"
    ),
    "next_head": (
        "the wrong head: head h is the slice h*d_head .. (h+1)*d_head - 1 of out_proj's input"
    ),
    "one_column": ONE_COLUMN,
    "lesson_layer": (
        "you patched the head in layer 0 whatever `layer` is (the lesson's model.layers[0]): "
        "hook model.layers[layer].self_attn.out_proj"
    ),
    "whole_layer": (
        "you patched every head of the layer; only head `head`'s slice comes from the "
        "clean run, the other heads keep their corrupted outputs"
    ),
    "others_zeroed": (
        "the other heads' outputs became 0: replace only head `head`'s slice of out_proj's "
        "input and keep the other heads' corrupted outputs (clone the input, assign the slice)"
    ),
    "added": (
        "you ADDED the clean output to the head's corrupted one (+=): patching replaces the "
        "head's slice, z[..., cols] = clean (an assignment), so the head outputs exactly what "
        "it output on the clean input"
    ),
    "batch_row0": (
        "every sequence of the corrupted batch got the FIRST clean sequence's output (row 0, "
        "broadcast over the batch): sequence b takes its own clean output, so keep the whole "
        "(batch, seq, d_head) slice, clean[..., cols], and assign it to z[..., cols]"
    ),
    "last_position": (
        "you patched the last position only: the head outputs what it output on the clean "
        "input at EVERY position, so replace its whole (batch, seq, d_head) slice, "
        "z[..., cols] = clean[..., cols], not z[:, -1, cols]"
    ),
    "hooks_left": (
        "a hook is still registered after your function returned (the clean run's recording "
        "hook or the patching hook): remove each one, in a `finally`"
    ),
    "output_slice": (
        "you patched a slice of out_proj's OUTPUT (or self_attn's), where every feature mixes "
        "all the heads; head h's output is the slice h*d_head .. (h+1)*d_head - 1 of "
        "out_proj's INPUT (a forward pre-hook)"
    ),
    "clean_logits": (
        "you returned the clean run's logits: the patched run is the CORRUPTED input, "
        "with only this head's slice taken from the clean run"
    ),
    "stale": (
        "the clean output came from an earlier call (a cache kept between calls, a mutable "
        "default such as cache={}, made once and shared by every call, or a global): record the "
        "clean run on every call, with these clean_ids"
    ),
    "no_effect": (
        "your patch never took effect: the logits equal those of the corrupted input "
        "run unpatched. Does your pre-hook RETURN the patched input (`return (z,)`; a hook "
        "that returns None keeps the original, and a cloned z changed in it is lost)? Was "
        "the patching hook removed before the corrupted run, or did "
        "a recording hook still registered overwrite the clean output with the "
        "corrupted one? Or did your slice pick nothing: z[:, a:b] slices the positions (dim "
        "1), head h's features are the last dim, z[..., h*d_head:(h+1)*d_head], with this "
        "model's d_head = d_model // num_heads"
    ),
}


# "Target sizes: [3, 6, 8].  Tensor sizes: [2, 7, 8]": a clean slice of the head's width whose
# batch or seq is not this call's, so it came from another call
_SIZES = re.compile(r"Target sizes: \[([\d, ]*)\]\.\s+Tensor sizes: \[([\d, ]*)\]")


def _other_call(message: str) -> bool:
    sizes = _SIZES.search(message)
    target, tensor = (sizes.group(i).split(", ") for i in (1, 2)) if sizes else ([], [])
    return len(target) == len(tensor) == 3 and target[2] == tensor[2] and target != tensor


_FIRST = weakref.WeakKeyDictionary()  # "stale": the clean output of a model's first call


def wrong_patch(model, clean_ids, corrupted_ids, layer, head, *, mistake):
    """The patched run's logits, with the named mistake."""
    out_proj = model.layers[0 if mistake == "lesson_layer" else layer].self_attn.out_proj
    d_head = out_proj.in_features // model.config.num_heads
    which = head + 1 if mistake == "next_head" else head
    part = (
        slice(which, which + 1)
        if mistake == "one_column"
        else slice(which * d_head, (which + 1) * d_head)
    )
    saved = []
    if mistake == "output_slice":  # out_proj's output, whose every feature mixes the heads
        handle = out_proj.register_forward_hook(lambda m, a, o: saved.append(o))
        with torch.no_grad():
            model(clean_ids)
        handle.remove()
        handle = out_proj.register_forward_hook(
            lambda m, a, o: torch.cat(
                [o[..., : part.start], saved[0][..., part], o[..., part.stop :]], dim=-1
            )
        )
        with torch.no_grad():
            logits = model(corrupted_ids)
        handle.remove()
        return logits
    saved = _FIRST.setdefault(model, saved) if mistake == "stale" else saved
    handle = out_proj.register_forward_pre_hook(lambda m, a: saved.append(a[0]))
    with torch.no_grad():
        model(corrupted_ids if mistake == "reversed" else clean_ids)
    handle.remove()

    def patch(module, args):
        if mistake == "whole_layer":
            return (saved[0],)
        z = args[0].clone() * (mistake != "others_zeroed")  # the other heads zeroed
        kept = z[..., part] if mistake == "added" else 0.0  # += instead of =
        clean = saved[0][:1] if mistake == "batch_row0" else saved[0]  # row 0, broadcast
        if mistake == "last_position":  # one position patched, as at one token in Meng et al.
            z[:, -1, part] = clean[:, -1, part]
            return (z,)
        z[..., part] = kept + clean[..., part]
        return (z,)

    handle = out_proj.register_forward_pre_hook(patch)
    if mistake == "no_effect":  # the patch removed before the corrupted run
        handle.remove()
    with torch.no_grad():
        logits = model(clean_ids if mistake in ("reversed", "clean_logits") else corrupted_ids)
    if mistake not in ("hooks_left", "no_effect"):
        handle.remove()
    return logits


@register
class PatchHead(ModelTask):
    id = "ex11.patch_head"
    lesson = f"{LESSON}, sections 1 (hooks that change activations) and 5 (ablation)"
    reference = "course_lib.inspection.patch_head"
    forbidden = ("course_lib.inspection.head_inputs", "course_lib.inspection.ablate_heads")
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_patch)
    atol = 1e-4

    def call(self, obj, case):
        try:
            return super().call(obj, case)
        except RuntimeError as error:  # a clean slice of an earlier call's (batch, seq) shape
            if not _other_call(str(error)):
                raise
            hint = MISTAKES["stale"]
            raise GradingError(f"your code raised RuntimeError: {error}. Hint: {hint}") from None

    def cases(self, gen):
        cases = []
        for spec, shape, layer, head in (
            ({"kind": "random", "seed": 10, "block": 7}, (2, 7), 1, 1),
            ({"kind": "random", "seed": 11, "layers": 3, "positions": "rope"}, (3, 6), 0, 2),
            ({"kind": "random", "seed": 12, "heads": 4, "d_model": 16}, (1, 9), 1, 0),
        ):
            args = (randint(gen, 13, *shape), randint(gen, 13, *shape), layer, head)
            where = f"clean and corrupted ids {shape}, layer={layer}, head={head}"
            cases.append(Case(f"{describe(spec)}, {where}", args, data={"model": spec}))
        spec = circuit_spec(gen)
        clean = repeated(gen, 2, 8, 24)
        corrupted = torch.cat([clean[:, :8], repeated(gen, 2, 8, 24)[:, :8]], dim=1)
        description = (
            f"{describe(spec)}: clean = a repeated sequence, corrupted = its first half "
            "followed by other tokens, layer=1, head=3"
        )
        last = raising_case(
            gen, "clean and corrupted ids", lambda ids: (randint(gen, 13, 2, 20), 1, 1)
        )
        # drawn last (the cases above stay as they were): a second call on the same model and
        # head, with other ids, must not reuse the first call's clean output
        twice = Case(
            f"{cases[0].description}, called a second time with other ids",
            (*(randint(gen, 13, 2, 7) for _ in range(2)), 1, 1),
            data={"model": cases[0].data["model"], "earlier": [cases[0].args]},
        )
        circuit = Case(description, (clean, corrupted, 1, 3), data={"model": spec})
        return [*cases, twice, circuit, last]
