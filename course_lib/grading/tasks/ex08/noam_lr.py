"""ex08.noam_lr: the warm-up schedule of the original Transformer."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, Task, compare_values, register

MINUS_ONE_HALF = (
    "** binds tighter than /: x**-1/2 is (x**-1) / 2, not x^-0.5; write x**-0.5 and "
    "warmup**-1.5 (or x**(-1/2))"
)
FLOOR_EXPONENT = (
    "// is floor division: -1 // 2 is -1 and -3 // 2 is -2, so x ** (-1 // 2) is 1 / x; write "
    "the exponents as -0.5 and -1.5 (or -1 / 2 and -3 / 2, with /)"
)
MISTAKES = {
    "no_warmup": "your rate does not rise during the warm-up: the rising branch is missing or "
    "too large (warmup^-1.5 = 1 / warmup^1.5, not warmup^1.5); take the min of step^-0.5 "
    "(decay) and step * warmup^-1.5 (linear rise)",
    "no_decay": "you left out the decay: take the min of step^-0.5 and step * warmup^-1.5",
    "flat_after_peak": "you left out the decay: take the min of step^-0.5 and step * "
    "warmup^-1.5",  # warmup**-0.5 for step**-0.5: the rate stays at its peak
    "max": "that is the max of the two terms; the schedule is their min",
    "warmup_exponent": "wrong exponent on warmup: the rising branch is step * warmup^-1.5, so "
    "that both branches meet at step = warmup",
    "rise_over_warmup": "wrong exponent on warmup: the rising branch is step * warmup^-1.5, not "
    "step / warmup, so that both branches meet at step = warmup",
    "d_model_exponent": "wrong exponent on d_model: the factor is d_model^-0.5 (bigger models, "
    "smaller steps)",
    "d_model_inverse": "wrong exponent on d_model: the factor is d_model^-0.5, its inverse "
    "square root, not 1 / d_model",
    "lesson_warmup": "your rates are those of warmup=100, the lesson's: use the warmup argument",
    "step_exponent": "wrong exponent on step: after the warm-up the rate decays as step^-0.5, "
    "not 1/step",
    "no_d_model_factor": "the factor d_model^-0.5 is missing: lr = d_model^-0.5 * "
    "min(step^-0.5, step * warmup^-1.5)",
    "one_step_ahead": "your schedule is one step ahead: the steps count from 1 (the first step "
    "is step=1), so use step as it is given, not step + 1",
    "one_step_behind": "the steps already count from 1 (the first step is step=1): use step as "
    "it is given; step - 1 is 0 at the first step, and 0^-0.5 is infinite",
    "scale_in_min": "d_model^-0.5 multiplies only one term inside your min: it scales the whole "
    "min, lr = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)",
    "minus_one_half": MINUS_ONE_HALF,
    "d_model_minus_one_half": MINUS_ONE_HALF,  # on d_model alone: was told "no factor"
    "step_minus_one_half": MINUS_ONE_HALF,  # on one term alone: no hint
    "warmup_minus_three_halves": MINUS_ONE_HALF,
    "rise_grouped": "(step * warmup) ** -1.5 raises step to the power too: the rising term is "
    "step * warmup ** -1.5, step times warmup^-1.5 (** binds tighter than *, so no brackets)",
    "rise_swapped": "the rising term is step * warmup**-1.5 (it grows with step during the "
    "warm-up); warmup * step**-1.5 falls from the first step, so your rate never rises",
    "floor_exponents": FLOOR_EXPONENT,  # d_model ** (-1 // 2) * min(step ** (-1 // 2), ...)
    "warmup_floor_exponent": FLOOR_EXPONENT,  # warmup ** (-3 // 2) alone: was told nothing
    # min(warmup**-0.5, warmup * step**-1.5): got no hint
    "step_warmup_swapped": "step and warmup are swapped in your formula: step, the current "
    "step, is in both terms and warmup only in the rising one, d_model**-0.5 * "
    "min(step**-0.5, step * warmup**-1.5)",
    # min(step / warmup, (warmup / step) ** 0.5): was told "the lesson's factor"
    "peak_one": "your rate peaks at 1, at step = warmup: min(step / warmup, (warmup / step) ** "
    "0.5) is the shape alone (a LambdaLR multiplier); the task's rate is the paper's, "
    "d_model**-0.5 * min(step**-0.5, step * warmup**-1.5), which peaks at "
    "(d_model * warmup)**-0.5",
}


def wrong_noam_lr(step, d_model, warmup, *, mistake=""):
    """d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) with one named mistake."""
    step = {"one_step_ahead": step + 1, "one_step_behind": step - 1}.get(mistake, step)
    warmup = 100 if mistake == "lesson_warmup" else warmup  # the lesson's recipe
    if mistake == "step_warmup_swapped":
        step, warmup = warmup, step
    if mistake == "minus_one_half":  # x**-1/2 is (x**-1) / 2
        return d_model**-1 / 2 * min(step**-1 / 2, step * warmup**-3 / 2)
    decay = {
        "step_exponent": step**-1.0,
        "step_minus_one_half": step**-1 / 2,
        "flat_after_peak": warmup**-0.5,
        "floor_exponents": step ** (-1 // 2),
    }
    decay = decay.get(mistake, step**-0.5)
    rise = {
        "warmup_exponent": warmup**-0.5,
        "warmup_minus_three_halves": warmup**-3 / 2,
        "rise_over_warmup": warmup**-1.0,
        "rise_grouped": step**-2.5 * warmup**-1.5,  # times step: (step * warmup) ** -1.5
        "floor_exponents": warmup ** (-3 // 2),
        "warmup_floor_exponent": warmup ** (-3 // 2),
    }
    rise = step * rise.get(mistake, warmup**-1.5)
    rise = warmup * step**-1.5 if mistake == "rise_swapped" else rise
    scale = {
        "d_model_exponent": d_model**0.5,
        "no_d_model_factor": 1.0,
        "d_model_inverse": 1 / d_model,
        "d_model_minus_one_half": d_model**-1 / 2,
        "floor_exponents": d_model ** (-1 // 2),
        "peak_one": warmup**0.5,  # warmup**0.5 * min(...) = min(step / warmup, ...)
    }
    scale = scale.get(mistake, d_model**-0.5)
    if mistake == "no_warmup":
        return scale * decay
    if mistake == "no_decay":
        return scale * rise
    if mistake == "scale_in_min":  # min(d_model**-0.5 * step**-0.5, step * warmup**-1.5)
        return min(scale * decay, rise)
    return scale * (max if mistake == "max" else min)(decay, rise)


def _steps_for(w: int) -> list[int]:
    """Steps on both sides of the peak: early warm-up, just before/at/after warmup, the decay."""
    return sorted({1, 2, max(1, w // 2), max(1, w - 1), w, w + 1, 3 * w, 10 * w + 7})


@register
class NoamLr(Task):
    """The learning rate at each step of a run; a case is one run's steps."""

    id = "ex08.noam_lr"
    lesson = "lesson 08, section 'The warm-up schedule'"
    reference = "course_lib.train.noam_lr"
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_noam_lr)

    def cases(self, gen):
        return [
            Case(
                f"d_model={d_model}, warmup={warmup}, steps {_steps_for(warmup)}",
                data={"steps": _steps_for(warmup), "d_model": d_model, "warmup": warmup},
            )
            for d_model, warmup in ((512, 4000), (128, 100), (64, 1), (256, 30))
        ]

    def call(self, obj, case):
        d_model, warmup = case.data["d_model"], case.data["warmup"]
        if isinstance(obj(1, d_model, warmup), torch.Tensor):  # EX08-1
            raise GradingError(
                "noam_lr returns a tensor; the task asks for a Python float (use "
                "math and plain numbers, or float(...))"
            )
        values = []
        for step in case.data["steps"]:
            value = obj(step, d_model, warmup)
            values.append(float(value) if isinstance(value, torch.Tensor) else value)
        return values

    def compare(self, got, want, case):
        message = compare_values(got, want, "your learning rates")
        if message is None:
            return None
        if not isinstance(got, list) or len(got) != len(want):
            return message
        for step, g, w in zip(case.data["steps"], got, want, strict=True):
            if isinstance(g, dict) and "__repr__" in g:  # a numpy scalar, say
                kind = g["__repr__"].strip("<>")
                return (
                    f"at step {step} your learning rate is a {kind}, not a Python float: float(lr)"
                )
            if compare_values(g, w) is not None:
                shown = f"{g:.6g}" if isinstance(g, (int, float)) else repr(g)
                return f"at step {step} your learning rate is {shown}, expected {w:.6g}"
        return message

    def diagnose(self, got, want, case):
        if not (isinstance(got, list) and all(isinstance(g, float) for g in got)):
            return None
        ratios = {round(g / w, 6) for g, w in zip(got, want, strict=False)}
        d_model = case.data["d_model"]
        if ratios == {round((d_model / 64) ** 0.5, 6)} and d_model != 64:
            return "your rates are those of d_model=64, the lesson's: use the d_model argument"
        if len(ratios) == 1 and len(got) == len(want):  # the lesson's factor, kept
            return (
                f"every rate is {ratios.pop():g} times the expected one: the task's formula "
                "has no factor (the lesson's noam_lr multiplies by factor; here it is 1)"
            )
        return None
