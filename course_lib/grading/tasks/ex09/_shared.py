"""What ex09's tasks share: a course GPT of given sizes, and random weights for it."""

from __future__ import annotations

import torch

RESEEDS_GLOBAL_RNG = (
    "your code changed PyTorch's global random state although a generator was given (a "
    "torch.manual_seed(...) inside it?): that resets the random draws of the whole program, and "
    "with generator=None every call would draw the same tokens; draw only from `generator`"
)


def changes_global_rng(run):
    """(run(), whether it changed the global random state), from a state that no
    torch.manual_seed call gives (one draw past seed 0); the state is restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        torch.rand(1)
        before = torch.random.get_rng_state()
        out = run()
        return out, not torch.equal(before, torch.random.get_rng_state())


def capstone_name(key: str) -> str:
    """A course_lib.gpt.GPT state-dict key -> the capstone's (learned positions are a plain
    nn.Embedding there)."""
    return key.replace("position_embedding.embedding.", "position_embedding.")


def course_gpt(sizes: dict, state: dict | None = None, seed: int = 0, cls=None):
    """A course GPT (or subclass `cls`) of these sizes, its own init drawn under `seed` without
    touching the global generator, then given `state` (in the dtype of its weights)."""
    from ....gpt import GPT, GPTConfig

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = (cls or GPT)(GPTConfig(**sizes))
    if state is not None:
        model = model.to(state["token_embedding.weight"].dtype)
        model.load_state_dict(state)
    return model


def random_gpt_state(gen, sizes, dtype, name=capstone_name, near_1=None):
    """Random weights drawn from `gen` for a course GPT of these sizes (GPTConfig's fields),
    keys renamed by `name`: 1 + 0.2 N(0, 1) where `near_1(key)` (default: a norm's weight),
    else 0.3 N(0, 1); lm_head.weight is token_embedding.weight unless tie_weights=False."""
    near_1 = near_1 or (lambda key: "norm" in key and key.endswith("weight"))
    tied = sizes.get("tie_weights", True)
    state = {}
    for key, value in course_gpt(sizes).state_dict().items():
        key = name(key)
        if key == "lm_head.weight" and tied:
            continue  # the same tensor as token_embedding.weight
        noise = torch.randn(value.shape, generator=gen, dtype=torch.float64)
        state[key] = (1.0 + 0.2 * noise if near_1(key) else 0.3 * noise).to(dtype)
    if tied:
        state["lm_head.weight"] = state["token_embedding.weight"]
    return state
