"""ex09.GPT, the capstone: the learner's own GPT with course_lib.gpt.GPT's parameter names.
Graded without training: GPT-2's init, then forward, one optimisation step and generation
against the reference, with the reference's weights loaded."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ....multihead import MultiHeadAttention
from ...core import Case, GradingError, compare_values, exercise_state, register
from ..common import ModuleTask

MISTAKES = {
    "no_causal": "a position sees the future: the self-attention needs "
    "the causal mask (True on and below the diagonal)",
    "post_norm": "the GPT's blocks are pre-norm: x = x + attn(norm1(x)), "
    "then x = x + ffn(norm2(x)); you normalised after adding (post-norm)",
    "torch_mask": "the causal mask is inverted: here True means 'may attend' (True on and below "
    "the diagonal, tril); PyTorch's nn.MultiheadAttention uses True = blocked",
    "attend_raw": "the self-attention must read the normalised input: h = norm1(x), then "
    "x = x + self_attn(h, h, h, ...)",
    "relu": "the GPT's feed-forward uses GELU (F.gelu), not ReLU",
    "triu": "the causal mask is the upper triangle (triu): each position would see the "
    "future and not the past. True must be on and below the diagonal (key j <= "
    "query i): torch.ones(n, n, dtype=torch.bool).tril()",
    "tanh_gelu": "this GELU is the tanh approximation (approximate='tanh'), which GPT-2's own "
    "code used; the task asks for the exact GELU, F.gelu(x), as course_lib's GPT uses: "
    "the two differ by up to about 1e-3, more than the check allows",
    "lesson_positions": "lesson 09's position_embedding is a module that ADDS positions to its "
    "input; here position_embedding is an nn.Embedding of the positions 0 .. seq-1, so "
    "look them up and add them: token_embedding(ids) + "
    "position_embedding(torch.arange(seq))",
    "no_positions": "add the position embedding of positions 0 .. seq-1 to the token embedding",
    "no_final_norm": "apply the final LayerNorm `norm` to the last block's output before lm_head",
    "untied": "the output layer must share its matrix with the token "
    "embedding: self.lm_head.weight = self.token_embedding.weight (the forward pass "
    "agrees, but one step of training updates the two copies separately)",
}


def _reference_gpt(sizes: dict):
    from ....gpt import GPT, GPTConfig

    with torch.random.fork_rng(devices=[]):
        return GPT(GPTConfig(**sizes))


def _gpt_state(gen, sizes, dtype):
    model = _reference_gpt(sizes)
    state = {}
    for name, value in exercise_state(model.state_dict()).items():
        if name == "lm_head.weight":
            continue  # tied: the same tensor as token_embedding.weight
        noise = torch.randn(value.shape, generator=gen, dtype=torch.float64)
        state[name] = (1.0 + 0.2 * noise if "norm" in name else 0.3 * noise).to(dtype)
    state["lm_head.weight"] = state["token_embedding.weight"]
    return state


class WrongBlock(nn.Module):
    """A pre-norm GPT block, written as a learner would, with one named mistake."""

    def __init__(self, d_model, num_heads, mistake=""):
        super().__init__()
        self.mistake = mistake
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=False)
        self.linear1 = nn.Linear(d_model, 4 * d_model, bias=False)
        self.linear2 = nn.Linear(4 * d_model, d_model, bias=False)
        self.norm1 = nn.LayerNorm(d_model, bias=False)
        self.norm2 = nn.LayerNorm(d_model, bias=False)

    def forward(self, x):
        n, mistake = x.shape[1], self.mistake
        masks = {
            "no_causal": None,
            "torch_mask": torch.ones(n, n, dtype=torch.bool).triu(1),  # True = blocked
            "triu": torch.ones(n, n, dtype=torch.bool).triu(),  # the future and itself
        }
        mask = masks.get(mistake, torch.ones(n, n, dtype=torch.bool).tril())
        activation = {"relu": F.relu, "tanh_gelu": _tanh_gelu}.get(mistake, F.gelu)

        def attention(h):
            return self.self_attn(h, h, h, mask=mask)[0]

        def feed_forward(h):
            return self.linear2(activation(self.linear1(h)))

        if mistake == "post_norm":
            x = self.norm1(x + attention(x))
            return self.norm2(x + feed_forward(x))
        h = x if mistake == "attend_raw" else self.norm1(x)  # attention reads the raw x
        x = x + attention(h)
        return x + feed_forward(self.norm2(x))


class WrongGPT(nn.Module):
    """A learner-style GPT with one named mistake (`mistake`); "" is a right one, GPT-2's
    init included."""

    mistake = ""

    def __init__(self, vocab_size, block_size, d_model, num_heads, num_layers):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(block_size, d_model)
        self.layers = nn.ModuleList(
            WrongBlock(d_model, num_heads, self.mistake) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, bias=False)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if self.mistake != "untied":
            self.lm_head.weight = self.token_embedding.weight
        for param in self.parameters():  # GPT-2's init, which the statement asks for
            if param.dim() == 2:
                nn.init.normal_(param, std=0.02)

    def forward(self, ids):
        if self.mistake == "lesson_positions":  # lesson 09's module that adds positions, copied
            x = self.position_embedding(self.token_embedding(ids))
        else:
            x = self.token_embedding(ids)
        if self.mistake not in ("no_positions", "lesson_positions"):
            x = x + self.position_embedding(torch.arange(ids.shape[1]))
        for layer in self.layers:
            x = layer(x)
        if self.mistake != "no_final_norm":
            x = self.norm(x)
        return self.lm_head(x)


def _mistake_gpt(mistake: str) -> type:
    """WrongGPT with one named mistake, as a class the check builds like the learner's."""
    return type(f"GPT_{mistake}", (WrongGPT,), {"mistake": mistake})


def _tanh_gelu(x):
    return F.gelu(x, approximate="tanh")


def _sgd_step(model, ids, lr=0.5):
    """One plain SGD step on the next-token loss; returns (loss, parameters after, by name)."""
    import torch.nn.functional as F

    model.train()
    x, y = ids[:, :-1], ids[:, 1:]
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    model.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():  # parameters() lists a tied matrix once
            if p.grad is not None:
                p -= lr * p.grad
    state = exercise_state(model.state_dict())  # the exercise's names, in the same order
    return float(loss.detach()), torch.cat([state[k].flatten() for k in sorted(state)])


def _check_gpt2_init(model: nn.Module) -> None:
    """The statement asks for GPT-2's N(0, 0.02^2) init of the token embedding and of the
    feed-forward's first layer (the layers writing into the residual stream may be smaller)."""
    for name, param in model.named_parameters():
        if name == "token_embedding.weight" or name.endswith("linear1.weight"):
            std = float(param.detach().double().std())
            if not 0.015 <= std <= 0.025:
                shrunk = name.endswith("linear1.weight") and std < 0.015
                raise GradingError(
                    f"your {name} starts with standard deviation {std:.3g}: initialise every "
                    "weight matrix (nn.Linear and nn.Embedding) from N(0, 0.02^2), GPT-2's "
                    "init (nn.init.normal_(weight, std=0.02)); "
                    + (
                        "the optional 1/sqrt(2 * num_layers) shrinks only the layers that write "
                        "into the residual stream, linear2 and the attention's out_proj, not "
                        "linear1"
                        if shrunk
                        else "PyTorch's defaults start the tied logits far too large"
                    )
                )


@register
class CapstoneGPT(ModuleTask):
    id = "ex09.GPT"
    lesson = "lesson 09, section 'The GPT: the same blocks, a causal mask, no cross-attention'"
    reference = "course_lib.gpt.gpt_from_sizes"
    forbidden = (
        "course_lib.gpt.GPT",
        "course_lib.blocks.EncoderLayer",
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerEncoder",
        "torch.nn.TransformerDecoderLayer",
    )

    def cases(self, gen):
        def case(description, kind, sizes, batch, seq, dtype=torch.float32, new=0):
            ids = torch.randint(0, sizes["vocab_size"], (batch, seq), generator=gen)
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
            return Case(
                description,
                data={
                    "kind": kind,
                    "sizes": sizes,
                    "ids": ids,
                    "state": _gpt_state(gen, sizes, dtype),
                    "new": new,
                    "seed": seed,
                },
            )

        small = {"vocab_size": 13, "block_size": 8, "d_model": 16, "num_heads": 2, "num_layers": 1}
        deeper = {"vocab_size": 9, "block_size": 6, "d_model": 12, "num_heads": 3, "num_layers": 2}
        return [
            case(
                "forward: vocab 13, block_size 8, d_model 16, 2 heads, 1 layer, ids (2, 5)",
                "forward",
                small,
                2,
                5,
            ),
            case(
                "forward: 2 layers, 3 heads, ids (1, 6) filling block_size, float64",
                "forward",
                deeper,
                1,
                6,
                dtype=torch.float64,
            ),
            case("forward on a single token, ids (3, 1)", "forward", small, 3, 1),
            case(
                "one SGD step (lr 0.5) on the next-token loss of ids (3, 7), then the loss and "
                "every parameter compared",
                "step",
                small,
                3,
                7,
            ),
            case(
                "one SGD step, 2 layers, float64, ids (2, 7)",
                "step",
                deeper,
                2,
                7,
                dtype=torch.float64,
            ),
            case(
                "generation with course_lib.gpt.generate: prompt (2, 3), 8 new tokens "
                "(beyond block_size, so the window slides), temperature 1.0, same seed",
                "generate",
                deeper,
                2,
                3,
                dtype=torch.float64,
                new=8,
            ),
            case(
                "GPT-2's init: right after GPT(...) is built (before any weights are loaded), "
                "token_embedding.weight and every linear1.weight have standard deviation 0.02",
                "init",
                small,
                1,
                1,
            ),
        ]

    def init_args(self, case):
        sizes = case.data["sizes"]
        names = ("vocab_size", "block_size", "d_model", "num_heads", "num_layers")
        return tuple(sizes[name] for name in names), {}

    def build(self, obj, case):
        with torch.random.fork_rng(devices=[]):  # a model's own init draws from the global RNG
            torch.manual_seed(0)
            return super().build(obj, case)

    def call(self, obj, case):
        if case.data["kind"] != "init":
            return super().call(obj, case)
        _check_gpt2_init(self.build(obj, case))  # the model's own weights, none loaded
        return "GPT-2's init"

    def weights(self, case):
        return case.data["state"]

    def not_a_module(self, built):
        return f"GPT(...) should build a torch.nn.Module, got {type(built).__name__}"

    def run(self, model, case):
        d = case.data
        if d["kind"] == "forward":
            model.eval()
            with torch.no_grad():
                return model(d["ids"])
        if d["kind"] == "step":
            return _sgd_step(model, d["ids"])
        from ....gpt import generate

        tokens = generate(
            _AsGPT(model, d["sizes"]["block_size"]),
            d["ids"],
            d["new"],
            generator=torch.Generator().manual_seed(d["seed"]),
        )
        return tokens

    def compare(self, got, want, case):
        if case.data["kind"] == "step":
            if not isinstance(got, tuple):
                return "the step could not run"
            if abs(got[0] - want[0]) > 1e-4 * max(1.0, abs(want[0])):
                return f"the loss before the step is {got[0]:.6g}, expected {want[0]:.6g}"
            return compare_values(got[1], want[1], "your parameters after one step")
        return compare_values(
            got, want, "your logits" if case.data["kind"] == "forward" else "your generated tokens"
        )

    def mistakes(self):
        return _MISTAKES


_MISTAKES = [(_mistake_gpt(name), hint) for name, hint in MISTAKES.items()]


class _AsGPT(nn.Module):
    """Any model that maps ids to logits, fed the last block_size tokens, for generate."""

    def __init__(self, model, block_size):
        super().__init__()
        self.model, self.block_size = model, block_size

    def forward(self, ids):
        return self.model(ids[:, -self.block_size :])
