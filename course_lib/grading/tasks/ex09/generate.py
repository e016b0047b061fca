"""ex09.generate (transfer: the lesson imports its generation loop; the learner writes it,
with a KV cache)."""

from __future__ import annotations

import types
from dataclasses import replace

import torch

from ...core import Case, GradingError, Task, compare_values, register
from ..common import randn
from ._shared import RESEEDS_GLOBAL_RNG, changes_global_rng, course_gpt

MISTAKES = {
    "stale": "the cache is stale: forward_cached returns the cache with the "
    "new token's keys and values appended; keep it (logits, cache = "
    "model.forward_cached(...)) or the next step forgets the tokens generated so far",
    "restart": "the positions restart at 0: the newest token sits at position "
    "(number of tokens so far) - 1, so pass start = ids.shape[1] - 1 after appending "
    "it",
    "off_by_one": "the new token's position is off by one: after appending it, "
    "it sits at position ids.shape[1] - 1 (positions count from 0)",
    "first_position": "sample from the logits of the LAST position, "
    "logits[:, -1]: they predict the next token",
    "no_temperature": "temperature is not passed on to sample_next, which then samples at its "
    "default 1.0: at temperature 0 (greedy) the tokens must be the arg-max; pass "
    "temperature, top_k and generator on",
    "no_top_k": "top_k is not passed on to sample_next, so every token may be drawn: pass "
    "temperature, top_k and generator on",
    "no_prompt": "feed the whole prompt first (start 0, an empty cache): its "
    "keys and values are what the new tokens attend to",
    "step_number": "the new token's position is its place in the whole sequence, after the "
    "prompt's tokens: start = ids.shape[1] - 1 after appending it, not the loop's step number",
    "one_early": "the new token is fed at the position of the token before it (start taken "
    "before appending it, as ids.shape[1] - 1): after appending, it sits at ids.shape[1] - 1",
    "no_cache": "the new token is fed with cache=None, so it attends only to itself: pass on "
    "the cache that the previous forward_cached returned (logits, cache = "
    "model.forward_cached(new_ids, cache, start))",
    "step_count": "the new token's position is its place in the whole sequence, after the "
    "prompt's tokens: start = ids.shape[1] - 1 after appending it, not the number of tokens "
    "generated so far",
    "refeed_all": "you fed the whole sequence again with the cache, so its keys and values are "
    "in the cache twice: the cache already holds every earlier token; feed only the newest one, "
    "model.forward_cached(ids[:, -1:], cache, ids.shape[1] - 1)",
    "stuck_position": "every new token is fed at the same position, the prompt's length: the "
    "position must move on by one at each step; compute it inside the loop, start = "
    "ids.shape[1] - 1 after appending the new token",
    "temperature_twice": "the logits are divided by the temperature twice, once in generate "
    "and again in sample_next, so the tokens are drawn at temperature squared: pass the raw "
    "logits[:, -1] to sample_next with the temperature, which divides them once (and takes "
    "temperature 0 as greedy)",
    "new_only": "return the prompt followed by the new tokens, (batch, t + max_new_tokens), not "
    "the continuation alone: append each new token to ids and return ids",
}


_KEPT_BETWEEN_CALLS = (  # #f9: a counter in a default argument or at module level
    "run once more on the same inputs, your generate fails otherwise (or not at all), so it "
    "keeps something from one call to the next (a position counter in a default argument such "
    "as pos=[0], or at module level?): each call starts afresh; compute the position inside "
    "it, start = ids.shape[1] - 1 after appending the new token"
)

_GPT_SIZES = {"vocab_size": 11, "block_size": 16, "d_model": 16, "num_heads": 2, "num_layers": 2}
# #rand10: in float32 the cached logits differ from the cache-free loop's by up to ~2e-6, so a
# greedy step whose two largest logits are closer than that may go either way: a right answer
# failed about one hidden seed in 90,000. The float32 greedy case redraws its weights until
# every step's two largest logits are this far apart.
_GREEDY_MARGIN = 1e-3


def _greedy_margin(state, ids, new) -> float:
    """The smallest gap between the two largest logits over the cache-free greedy steps."""
    from ....gpt import GPT

    model, margin = course_gpt(_GPT_SIZES, state, cls=GPT).eval(), float("inf")
    with torch.no_grad():
        for _ in range(new):
            logits = model(ids)[:, -1]  # (batch, vocab)
            top = logits.topk(2, dim=-1).values
            margin = min(margin, float((top[:, 0] - top[:, 1]).min()))
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return margin


def _draws_differ_squared(state, ids, new, seed, temperature) -> bool:
    """Whether the cache-free loop draws other tokens at temperature ** 2 than at temperature
    from the same generator state (h9: a temperature applied twice, in generate and again in
    sample_next, drew the same tokens by chance under about one seed in twelve)."""
    from ....gpt import GPT, generate

    model = course_gpt(_GPT_SIZES, state, cls=GPT).eval()
    tokens = [
        generate(model, ids, new, t, generator=torch.Generator().manual_seed(seed))
        for t in (temperature, temperature**2)
    ]
    return not torch.equal(*tokens)


def _greedy_of_logits_over_zero(d) -> torch.Tensor:
    """The greedy loop's tokens when generate divides the logits by temperature 0 before its
    sample_next takes the arg-max (h9: logits / 0 is +-inf, so the first positive logit wins)."""
    from ....gpt import GPT

    model, ids = course_gpt(_GPT_SIZES, d["state"], cls=GPT).eval(), d["ids"]
    with torch.no_grad():
        for _ in range(d["new"]):
            next_id = (model(ids)[:, -1] / 0.0).argmax(-1)  # (batch,)
            ids = torch.cat([ids, next_id[:, None]], dim=1)
    return ids


_NOT_GIVEN = object()
_ARGUMENT_LEFT_OUT = (  # #hunt18: forward_cached(ids[:, -1:], cache) scored full marks
    "your generate called forward_cached without its {} (or with start=None): pass all three, "
    "model.forward_cached(new_ids, cache, start) (cache None and start 0 for the prompt, then "
    "start = ids.shape[1] - 1 after appending the new token); your own GPT's forward_cached "
    "(task 5) takes them all and does not count the cache's tokens for you"
)


def _cache_only_gpt_class():
    from ....gpt import GPT

    class CacheOnlyGPT(GPT):
        """The course's GPT, but its full forward is switched off and cached positions counted."""

        positions_computed = 0
        calls = 0

        def forward(self, ids):
            raise GradingError(
                "this check's model runs only with its KV cache: call "
                "model.forward_cached(new_ids, cache, start) and feed each new token once, not "
                "model(ids) on the whole sequence"
            )

        def forward_cached(self, ids, cache=_NOT_GIVEN, start=_NOT_GIVEN):
            # #hunt18: the course's GPT infers a start left out (or None); a learner's does not
            left_out = [name for name, v in (("cache", cache), ("start", start)) if v is _NOT_GIVEN]
            if left_out or start is None:
                raise GradingError(_ARGUMENT_LEFT_OUT.format(" and ".join(left_out) or "start"))
            self.positions_computed += ids.shape[1]
            self.calls += 1
            return super().forward_cached(ids, cache, start)

    return CacheOnlyGPT


def _own_sample_next():
    """course_lib's sample_next under a code object of its own: generate may not call the
    finished version, and the listed mistakes stand for a learner who wrote their own."""
    from ....sampling import sample_next

    code = sample_next.__code__.replace(co_name="sample_next_of_a_learner")
    return types.FunctionType(
        code, sample_next.__globals__, "sample_next", sample_next.__defaults__
    )


def _wrong_generate(
    model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None, *, mistake=""
):
    sample_next = _own_sample_next()
    with torch.no_grad():
        if mistake == "no_prompt":  # the prompt is never fed; only its last token
            logits, cache = model.forward_cached(ids[:, -1:], None, ids.shape[1] - 1)
        else:
            logits, cache = model.forward_cached(ids, None, 0)
        for step in range(max_new_tokens):
            row = logits[:, 0] if mistake == "first_position" else logits[:, -1]
            if mistake == "temperature_twice" and temperature:  # here and in sample_next
                row = row / temperature
            temp = 1.0 if mistake == "no_temperature" else temperature  # sample_next's default
            k = None if mistake == "no_top_k" else top_k
            next_id = sample_next(row, temp, k, None, generator)  # (batch,)
            ids = torch.cat([ids, next_id[:, None]], dim=1)
            wrong_starts = {"restart": 0, "off_by_one": ids.shape[1], "step_number": step}
            wrong_starts |= {"step_count": step + 1, "refeed_all": 0}  # f09
            wrong_starts["one_early"] = ids.shape[1] - 2  # the previous token's position
            wrong_starts["stuck_position"] = ids.shape[1] - 1 - step  # the prompt's length
            start = wrong_starts.get(mistake, ids.shape[1] - 1)
            if ids.shape[1] >= model.config.block_size:
                start = min(start, model.config.block_size - 1)
            past = None if mistake == "no_cache" else cache  # no_cache: None at every step
            fed = ids if mistake == "refeed_all" else ids[:, -1:]  # the whole sequence again
            logits, new_cache = model.forward_cached(fed, past, start)
            if mistake != "stale":
                cache = new_cache
    return ids[:, ids.shape[1] - max_new_tokens :] if mistake == "new_only" else ids


SEEDED_WITHOUT_GENERATOR = (
    "two runs without a generator (generator=None) gave the same text: with no generator, pass "
    "None on to sample_next, which then draws from PyTorch's global random stream. A seed of "
    "your own for that case (torch.manual_seed(0), or torch.Generator().manual_seed(0) as the "
    "default) makes every text your generate samples without a generator the same"
)


@register
class Generate(Task):
    id = "ex09.generate"
    lesson = "lesson 09, sections 'Sampling strategies' and 'A KV cache'"
    reference = "course_lib.gpt.generate_with_cache"
    depends_on = ("sample_next",)
    forbidden = ("course_lib.gpt.generate", "course_lib.sampling.sample_next")

    def cases(self, gen):
        shapes = {k: v.shape for k, v in course_gpt(_GPT_SIZES).state_dict().items()}

        def case(
            description,
            batch,
            prompt,
            new,
            temperature=1.0,
            top_k=None,
            dtype=torch.float64,
            squared_differs=False,
        ):
            while True:  # float32 greedy: until no step is a near-tie (_GREEDY_MARGIN)
                state = {
                    k: (0.5 * randn(gen, *shape, dtype=torch.float64)).to(dtype)
                    for k, shape in shapes.items()
                }
                ids = torch.randint(0, _GPT_SIZES["vocab_size"], (batch, prompt), generator=gen)
                if dtype == torch.float64 or temperature != 0:
                    break
                if _greedy_margin(state, ids, new) >= _GREEDY_MARGIN:
                    break
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
            while squared_differs and not _draws_differ_squared(state, ids, new, seed, temperature):
                seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))  # h9: a draw apart
            kwargs = {"temperature": temperature, "top_k": top_k}
            data = {"state": state, "dtype": dtype, "ids": ids, "new": new, "kwargs": kwargs}
            return Case(description, data=data | {"seed": seed})

        # fmt: off
        return [  # batch, prompt, new tokens
            case("greedy (temperature 0), batch 2, a prompt of 3 tokens, 6 new tokens",
                 2, 3, 6, temperature=0.0),
            case("sampling at temperature 1.0, batch 3, a prompt of 1 token, 8 new tokens",
                 3, 1, 8),
            case("top_k=3 at temperature 1.5, batch 3, a prompt of 4 tokens, 10 new tokens",
                 3, 4, 10, temperature=1.5, top_k=3),
            case("max_new_tokens=1, batch 2, a prompt of 4 tokens", 2, 4, 1),
            case("max_new_tokens=0: the prompt comes back unchanged", 2, 3, 0),
            case("a prompt of 10 and 6 new tokens: exactly the context of 16 (block_size)",
                 2, 10, 6, temperature=0.7, squared_differs=True),
            case("float32 model, greedy, batch 4, a prompt of 2 tokens, 7 new tokens",
                 4, 2, 7, temperature=0.0, dtype=torch.float32),
            case("batch 1 (one prompt, as in the notebook), a prompt of 1 token, 5 new tokens, "
                 "temperature 0.8", 1, 1, 5, temperature=0.8),
        ]
        # fmt: on

    def _run(self, obj, case, cls, seeded=True):
        d = case.data
        model = course_gpt(_GPT_SIZES, d["state"], cls=cls).eval()
        kwargs = dict(d["kwargs"])
        if seeded:  # else the learner's default, generator=None
            kwargs["generator"] = torch.Generator().manual_seed(d["seed"])
        tokens = obj(model, d["ids"].clone(), d["new"], **kwargs)
        return model, tokens

    def _fails_otherwise(self, obj, case, error) -> bool:
        """Whether the same case run once more fails with another error, or not at all."""
        try:
            self._run(obj, case, _cache_only_gpt_class())
        except Exception as again:  # noqa: BLE001  (a learner's code may raise anything)
            return f"{type(again).__name__}: {again}" != f"{type(error).__name__}: {error}"
        return True

    def call(self, obj, case):
        d = case.data
        try:
            (model, tokens), reseeded = changes_global_rng(
                lambda: self._run(obj, case, _cache_only_gpt_class())
            )
        except (IndexError, RuntimeError, TypeError, ValueError) as error:
            hint = None  # #hunt8: two slips that the notebook's own calls run into
            if isinstance(error, TypeError) and "Generator" in str(error):
                hint = "sample_next got the generator as its top_p, its 4th parameter: pass "
                hint += "generator=generator by name"
            elif type(error) is not NotImplementedError and self._fails_otherwise(obj, case, error):
                hint = _KEPT_BETWEEN_CALLS
            elif d["ids"].shape[0] == 1 and type(error) is not NotImplementedError:
                hint = "with a batch of one prompt, .squeeze() drops the batch axis too: keep "
                hint += "it, logits[:, -1] and next_id[:, None], or squeeze(-1) only"
            if hint is None:
                raise
            raise GradingError(
                f"your code raised {type(error).__name__}: {error}. Hint: {hint}"
            ) from None
        draws = d["kwargs"]["temperature"] != 0 and d["new"] > 0  # is each draw the generator's?
        if draws:
            _, again = self._run(obj, case, _cache_only_gpt_class())
            if isinstance(tokens, torch.Tensor) and not torch.equal(tokens, again):
                raise GradingError(
                    "two runs with generators in the same state gave different tokens: pass "
                    "`generator` on to your sample_next (which passes it to torch.multinomial); "
                    "without it the draws come from PyTorch's global random state"
                )
        if reseeded:  # after: drawing from the global stream changes it too, and is told above
            raise GradingError(RESEEDS_GLOBAL_RNG)
        if draws:
            other = replace(case, data=d | {"seed": d["seed"] + 1})
            if torch.equal(tokens, self._run(obj, other, _cache_only_gpt_class())[1]):
                return tokens, "same tokens for another seed"  # judged in diagnose
        # #h20: 24 draws or more, which two right runs repeat with a chance under 1e-12 (an
        # estimate of the sum of P(text)^2 over hidden seeds 0-4): a seed of its own for None
        if draws and d["ids"].shape[0] * d["new"] >= 24:
            alone = self._run(obj, case, _cache_only_gpt_class(), seeded=False)[1]
            if torch.equal(alone, self._run(obj, case, _cache_only_gpt_class(), seeded=False)[1]):
                raise GradingError(SEEDED_WITHOUT_GENERATOR)
        # the prompt once, then each new token once (the last one may be fed or not)
        if model.positions_computed > d["ids"].shape[1] + d["new"]:
            return tokens, "positions"
        if model.calls > 1 + d["new"]:
            return tokens, "calls"
        return tokens, True

    def expected(self, case):
        from ....gpt import GPT, generate

        _, tokens = self._run(generate, case, GPT)  # the lesson's cache-free loop
        return tokens, True

    def compare(self, got, want, case):
        message = compare_values(got[0], want[0], "your tokens")
        if message or got[1] == want[1]:  # f09: a listed mistake's own "positions" matches too
            return message
        if got[1] == "calls":
            return (
                "your tokens are right, but the model was called more often than once for the "
                "prompt and once per new token: feed the whole prompt in one call "
                "(forward_cached(ids, None, 0)), not token by token"
            )
        if got[1] not in (True, "same tokens for another seed"):
            return (
                "your tokens are right, but the model computed more positions than the "
                "prompt plus one per new token: feed only the newest token at each step, "
                "with the cache"
            )
        return None

    def diagnose(self, got, want, case):
        if got[1] == "same tokens for another seed":  # torch.manual_seed(0) inside, or its own
            return (
                "your tokens stay the same when the generator is seeded otherwise: draw them from "
                "the `generator` you are given (pass it on to sample_next), not from a seed or "
                "generator of your own"
            )
        if case.data["kwargs"]["temperature"] == 0 and isinstance(got[0], torch.Tensor):
            if torch.equal(got[0], _greedy_of_logits_over_zero(case.data)):  # h9
                return MISTAKES["temperature_twice"]
        return None

    mistake_table, wrong = MISTAKES, staticmethod(_wrong_generate)
