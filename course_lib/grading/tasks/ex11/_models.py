"""What every ex11 task shares: the models its cases name, and `ModelTask`, which builds a
case's model afresh, runs the learner's function on it and checks that the model is as it
was afterwards (same outputs, no hook left behind)."""

from __future__ import annotations

import functools
import math
import traceback
import types

import torch

from course_lib.validation import is_number

from ...core import Case, GradingError, Task, compare_values
from ..common import randint

LESSON = "lesson 11"


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
    options = dict(positions=positions, tie_weights=not quiet, layer_norm_eps=norm_eps)
    config = GPTConfig(vocab, block, d_model, heads, layers, **options)
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


def circuit_spec(gen, **sizes):
    """A case's hand-built induction circuit, its seed drawn from `gen`."""
    return {"kind": "circuit", "seed": int(torch.randint(0, 10**6, (1,), generator=gen)), **sizes}


def build(spec: dict):
    """The model a spec names: a hand-built induction circuit (course_lib.inspection's, its
    previous-token head and induction head where `circuit_heads` puts them) or a random GPT."""
    options = {k: v for k, v in spec.items() if k != "kind"}
    if spec["kind"] != "circuit":
        return random_gpt(**options)
    from course_lib.inspection import induction_circuit

    layers, heads = options.get("layers", 2), options.get("heads", 4)
    prev, ind = circuit_heads(options["seed"], layers, heads)
    return induction_circuit(
        24, 24, prev, ind, num_layers=layers, num_heads=heads, seed=options["seed"]
    )


def describe(spec: dict) -> str:
    if "block" in spec:  # ids exactly block_size long, which the model takes
        rest = {k: v for k, v in spec.items() if k != "block"}
        return f"{describe(rest)} and block_size {spec['block']}, which the ids fill exactly"
    size = f"{spec.get('layers', 2)} layers x {spec.get('heads', 3)} heads"
    if spec.get("quiet"):
        eps = spec.get("norm_eps", 1e-5)
        return (
            f"a random GPT ({size}) whose final norm has eps={eps:g} and whose final residual "
            "stream is tiny: its variance is far below that eps, so eps matters"
        )
    if spec.get("training"):
        return f"a random GPT ({size}) in TRAINING mode (model.train(), dropout 0)"
    if spec["kind"] == "circuit":
        return (
            f"a hand-built induction circuit ({spec.get('layers', 2)} layers x "
            f"{spec.get('heads', 4)} heads, its heads at hidden positions)"
        )
    return (
        f"a random GPT ({size}, d_model={spec.get('d_model', 24)}, "
        f"{spec.get('positions', 'learned')} positions)"
    )


def model_case(spec, ids, *args, note="", raises=None, **data):
    """The case "<the model>, ids <shape><note>": the learner's function gets (model, ids,
    *args); `data` adds to the model's spec what `ModelTask.call` reads (probe, fails)."""
    description = f"{describe(spec)}, ids {tuple(ids.shape)}{note}"
    return Case(description, (ids, *args), data={"model": spec, **data}, raises=raises)


def raising_case(gen, name, more=lambda ids: ()):
    """A case whose ids (2, 20) are longer than the model's block_size (16): the forward
    raises, the function must let the ValueError through, and no hook may remain. The model
    is in training mode, so a mode switched to eval and put back only after a forward that
    succeeded (not in a `finally`), or never put back, is caught too. `more(ids)`: the
    function's other arguments."""
    spec = {"kind": "random", "seed": 15, "training": True}
    ids = randint(gen, 13, 2, 20)
    description = (
        f"{describe(spec)}, block_size 16, {name} (2, 20): the forward raises, and no hook may "
        "remain on the model afterwards, nor may its mode change"
    )
    data = {"model": spec, "probe": ids[:, :16], "fails": True}
    return Case(description, (ids, *more(ids)), data=data)


def repeated(gen, batch, period, vocab):
    """(batch, 2 * period): distinct random tokens, then the same again."""
    first = torch.stack([torch.randperm(vocab, generator=gen)[:period] for _ in range(batch)])
    return torch.cat([first, first], dim=1)


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


HOOK_CALL = (
    "PyTorch called one of your hooks with another number of arguments than it takes: a "
    "forward pre-hook is hook(module, args), or hook(module, args, kwargs) when registered with "
    "register_forward_pre_hook(hook, with_kwargs=True) (it then returns (args, kwargs)); a "
    "forward hook is hook(module, args, output)"
)
NO_FINALLY = (
    "your hooks stay on the model when the forward raises: handle.remove() runs only after a "
    "forward that succeeded; register the hooks and run the forward inside `try:`, and remove "
    "every handle in `finally:`"
)
MODE_NO_FINALLY = (  # before eval_left: on the raising case both leave the model in eval mode
    "you put the model's mode back only after a forward that succeeded: when the forward "
    "raises, model.train(was) never runs, and a model that came in training mode leaves in "
    "eval mode; put it back in a `finally:`, or do not call model.eval() at all "
    "(torch.no_grad() is all you need)"
)
KEPT = (
    "a list (or dict) that your hooks fill is kept between calls: made once, outside the "
    "function (a global) or as a mutable default argument (captured=[]), it still holds what "
    "an earlier call recorded, mixed with this call's activations; make it inside the function, "
    "so that every call starts with an empty one"
)
FULL_BLOCK = (
    "these ids are exactly block_size long, which the model takes: only ids LONGER than "
    "block_size are refused. If you check the length yourself, raise when ids.shape[1] > "
    "block_size (not >=), or leave the check to the model's forward"
)
ONE_COLUMN = (
    "head h is d_head features wide: the slice h*d_head .. (h+1)*d_head - 1 of out_proj's "
    "input, not the single feature h (slice(h, h + 1))"
)


def _holds_tensors(value) -> bool:
    """A list, tuple, set or dict that holds tensors (or tuples of them: a hook's output)."""
    if isinstance(value, dict):
        value = list(value.values())
    if not isinstance(value, (list, tuple, set)):
        return False
    return any(
        isinstance(v, torch.Tensor)
        or (isinstance(v, (list, tuple)) and any(isinstance(w, torch.Tensor) for w in v))
        for v in value
    )


def _size(value) -> int:
    """How many entries a container and the containers directly in it hold."""
    inner = value.values() if isinstance(value, dict) else value
    return len(value) + sum(len(v) for v in inner if isinstance(v, (list, dict, set)))


def held_tensors(obj) -> dict[str, tuple]:
    """{name: (container, its size)} for each container holding tensors that `obj` (or a
    function of its notebook it calls by name, such as the learner's attention_patterns) reads
    from its module, its default arguments or its closure: state that lives between calls.
    Only a hint hangs on it, so learner code it cannot read (a closure cell not yet filled, a
    container whose len() raises) gives {} instead of an error."""
    try:
        return _held_tensors(obj)
    except Exception:  # noqa: BLE001 - the learner's objects may raise anything
        return {}


def _held_tensors(obj) -> dict[str, tuple]:
    found, seen, todo, module = {}, set(), [obj], None
    while todo:
        fn = todo.pop()
        while isinstance(fn, functools.partial) or hasattr(fn, "__wrapped__"):
            fn = fn.func if isinstance(fn, functools.partial) else fn.__wrapped__
        if not isinstance(fn, types.FunctionType) or id(fn) in seen:
            continue
        module = fn.__globals__ if module is None else module
        if fn.__globals__ is not module:  # a library's function, not one of the notebook's
            continue
        seen.add(id(fn))
        code = fn.__code__
        params = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        given = fn.__defaults__ or ()
        values = dict(zip(params[code.co_argcount - len(given) :], given, strict=False))
        values.update(fn.__kwdefaults__ or {})
        cells = zip(code.co_freevars, fn.__closure__ or (), strict=False)
        values.update((name, cell.cell_contents) for name, cell in cells)
        codes, names = [code], set()
        while codes:  # the function's own code and every function (a hook) defined inside it
            one = codes.pop()
            names.update(one.co_names)
            codes += [c for c in one.co_consts if isinstance(c, types.CodeType)]
        for name in sorted(names):
            value = fn.__globals__.get(name)
            values[name] = value
            if isinstance(value, types.FunctionType):
                todo.append(value)
        found.update((k, (v, _size(v))) for k, v in values.items() if _holds_tensors(v))
    return found


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
    "mode_after_error": (
        "its training mode changed after the forward raised an error (the ids were longer than "
        "block_size): the model came in training mode and went out in eval mode",
        "do not call model.eval() or model.train() (torch.no_grad() is all you need), or put "
        "the mode back in the `finally:` (`model.train(was)`), so that it is restored even when "
        "the forward fails",
    ),
    "frozen": (
        "a parameter's requires_grad changed (model.requires_grad_(False), or weight."
        "requires_grad = False, left behind): the model no longer learns those weights",
        "change weights under `with torch.no_grad():`, which allows in-place edits of a weight "
        "that requires grad, and leave requires_grad as it was (or put it back in the "
        "`finally:`)",
    ),
    "replaced": (
        "a parameter is a new object (such as out_proj.weight = nn.Parameter(saved)): an "
        "optimizer made before still holds the old one, and trains it, not the model's",
        "put the values back into the same parameter, in place: weight.copy_(saved) under "
        "`with torch.no_grad():`",
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
    "outputs_after_error": (
        "its outputs differ from those before the call after the forward raised an error (the "
        "ids were longer than block_size): the weights you changed were not put back",
        "restore them in the `finally:` of a `try:` around the forward (or zero the head with "
        "a pre-hook that you remove there), so the model is restored even when the forward "
        "fails; let the error propagate",
    ),
}


CHANGED_MODEL = (
    "your function left the model changed after it returned: {what}. Whoever calls it next "
    "gets a different model; {fix}"
)


def _kept_or_raise(obj, held: dict, error: Exception):
    """Raise `error` with the KEPT hint when the learner's function reads a container that held
    an earlier call's tensors before this call (`held`) and grew during it (its zip() or
    torch.stack then fails on the mix), else as it is."""
    now = held_tensors(obj)
    try:
        kept = sorted(k for k, (v, size) in held.items() if k in now and _size(v) != size)
    except Exception:  # noqa: BLE001 - a learner's container whose len() raises
        kept = []
    if not kept:
        raise error
    yours = ", ".join(f"`{name}`" for name in kept)
    message = f"your code raised {type(error).__name__}: {error}. Hint: {KEPT} (yours: {yours})"
    raise GradingError(message) from None


class ModelTask(Task):
    """A task whose function takes a model first: `call` builds the case's model, runs the
    function, and returns (result, what the model looks like afterwards).

    A case with data["fails"] gives ids that the model refuses (longer than block_size): the
    forward raises, the learner's function must let that ValueError through, and only the
    model afterwards is compared (a hook left behind fails; any other error is the learner's).
    `atol` > 0: results are compared with that looser float tolerance (`close`)."""

    atol = 0.0

    def call(self, obj, case):
        model = build(case.data["model"])
        probe = case.data.get("probe", case.args[0])
        with torch.no_grad():
            before = model(probe)
        snapshot = _snapshot(model)
        parameters = dict(model.named_parameters())  # the objects themselves, and their flags
        trainable = {name: p.requires_grad for name, p in parameters.items()}
        fails = case.data.get("fails", False)
        result, raised = None, False
        for earlier in case.data.get("earlier", ()):  # a call before, on the same model
            obj(model, *earlier)
        held = held_tensors(obj)  # what earlier calls left in the learner's globals
        try:
            result = obj(model, *case.args, **case.kwargs)
        except ValueError as error:  # the forward's error (ids too long), expected here
            if not fails and case.raises is None and "block" in case.data["model"]:
                message = f"your code raised ValueError: {error}. Hint: {FULL_BLOCK}"
                raise GradingError(message) from None
            if not fails:
                _kept_or_raise(obj, held, error)
            raised = True
        except RuntimeError as error:
            _kept_or_raise(obj, held, error)
        except TypeError as error:  # PyTorch's call of a hook that takes other arguments
            frames = traceback.extract_tb(error.__traceback__)
            if not frames or "hook(" not in (frames[-1].line or ""):
                raise
            raise GradingError(f"your code raised TypeError: {error}. Hint: {HOOK_CALL}") from None
        if fails and not raised:
            return None, "swallowed"
        if any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()):
            state = "hook_after_error" if fails else "hook"
        elif _snapshot(model)[0] != snapshot[0]:
            state = "mode_after_error" if fails else "mode"
        elif _snapshot(model)[1] != snapshot[1]:
            state = "recording"
        elif any(p is not parameters.get(n) for n, p in model.named_parameters()):
            state = "replaced"
        elif {n: p.requires_grad for n, p in model.named_parameters()} != trainable:
            state = "frozen"
        else:
            with torch.no_grad():
                after = model(probe)
            same = torch.allclose(after, before, rtol=1e-5, atol=1e-5)
            state = "unchanged" if same else "outputs_after_error" if fails else "outputs"
        if isinstance(result, torch.Tensor):
            result = result.detach()
        return None if fails else result, state

    def compare(self, got, want, case):
        if not (isinstance(got, tuple) and len(got) == 2):
            return "your function did not return a result"
        if got[1] != want[1] and got[1] == "swallowed":
            return "your function returned a result where the forward raised"
        if got[1] != want[1]:
            what, fix = CHANGES.get(got[1], (str(got[1]), ""))
            return CHANGED_MODEL.format(what=what, fix=fix)
        if case.data.get("fails"):
            return None
        return close(got[0], want[0], self.atol) if self.atol else compare_values(got[0], want[0])


def close(got, want, atol, rtol=1e-4):
    """compare_values with a looser float tolerance: the same sum computed in another order."""
    if isinstance(want, float):
        if not is_number(got):
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
