"""The ex09 tasks that make the capstone the learner's own: `evaluate` (the validation loss),
`train` (the loop, judged on behaviour) and `gpt2_to_mine` (GPT-2's weights under the learner's
names). The learner's solutions below are the solution notebook's; every listed mistake failing
with its own hint is tested for every task in tests/test_grading.py."""

import copy
import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.optim.optimizer import _global_optimizer_pre_hooks

from course_lib.grading import NOTEBOOK_SEED, check_result, get_task
from course_lib.grading.core import judge, run_cases
from course_lib.grading.tasks.ex09 import evaluate as evaluate_task
from course_lib.grading.tasks.ex09 import gpt2_to_mine as gpt2_task
from course_lib.grading.tasks.ex09 import train as train_task
from course_lib.grading.tasks.ex09.evaluate import course_gpt, hidden_gpt_state, wrong_evaluate

TASKS = ("ex09.evaluate", "ex09.train", "ex09.gpt2_to_mine")

# ---- the learner's solutions (solutions/09_gpt_from_scratch.ipynb) ---------------------------


@torch.no_grad()
def evaluate(model, ids, block_size, batch_size=64):
    """Mean cross-entropy (nats per token) of `model` over ALL of `ids` (n,), as a float."""
    was_training = model.training
    model.eval()
    n_full = (len(ids) - 1) // block_size  # windows of block_size + 1 tokens, overlapping by one
    full = ids[: n_full * block_size + 1]
    x = full[:-1].reshape(n_full, block_size)  # (windows, block_size)
    y = full[1:].reshape(n_full, block_size)  # (windows, block_size)
    total, count = 0.0, 0
    for lo in range(0, n_full, batch_size):
        logits = model(x[lo : lo + batch_size])  # (b, block_size, vocab)
        targets = y[lo : lo + batch_size]  # (b, block_size)
        total += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
        count += targets.numel()
    rest = ids[n_full * block_size :]  # the last, shorter window
    if len(rest) > 1:
        logits = model(rest[:-1].unsqueeze(0))  # (1, len(rest) - 1, vocab)
        total += F.cross_entropy(logits[0], rest[1:], reduction="sum").item()
        count += len(rest) - 1
    model.train(was_training)
    return total / count


def train(model, batches, steps, max_lr, warmup_steps, clip=1.0):
    """Train `model` for `steps` steps on `batches`; returns the loss of each step (floats)."""
    optimizer = torch.optim.AdamW(model.parameters())  # the rate is set at every step below
    model.train()
    losses = []
    for step in range(steps):
        if step < warmup_steps:  # linear warm-up: max_lr / warmup_steps, ..., max_lr
            lr = max_lr * (step + 1) / warmup_steps
        else:  # cosine from max_lr towards 0 (progress 0 after the warm-up, near 1 at the end)
            progress = (step - warmup_steps) / (steps - warmup_steps)
            lr = 0.5 * max_lr * (1 + math.cos(math.pi * progress))
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = next(batches)  # (batch, seq) each
        logits = model(x)  # (batch, seq, vocab)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses


def gpt2_to_mine(hf_state, num_layers=None):
    """Hugging Face's GPT-2 state dict -> the state dict of your GPT (a new dict)."""
    sd = {key.removeprefix("transformer."): value for key, value in hf_state.items()}
    out = {
        "token_embedding.weight": sd["wte.weight"],
        "position_embedding.weight": sd["wpe.weight"],
        "norm.weight": sd["ln_f.weight"],
        "norm.bias": sd["ln_f.bias"],
        "lm_head.weight": sd["wte.weight"],  # tied to the token embedding
    }
    num_layers = num_layers or 1 + max(int(key.split(".")[1]) for key in sd if key.startswith("h."))
    for i in range(num_layers):
        h, mine = f"h.{i}.", f"layers.{i}."
        # c_attn: (d, 3d) = W_Q | W_K | W_V; transposed (3d, d), then three (d, d) blocks
        q, k, v = sd[h + "attn.c_attn.weight"].t().chunk(3, dim=0)
        q_bias, k_bias, v_bias = sd[h + "attn.c_attn.bias"].chunk(3)
        for name, weight, bias in (("q", q, q_bias), ("k", k, k_bias), ("v", v, v_bias)):
            out[f"{mine}self_attn.{name}_proj.weight"] = weight
            out[f"{mine}self_attn.{name}_proj.bias"] = bias
        for theirs, ours in (
            ("attn.c_proj", "self_attn.out_proj"),
            ("mlp.c_fc", "feed_forward.linear1"),
            ("mlp.c_proj", "feed_forward.linear2"),
        ):  # Conv1D (in, out) -> nn.Linear (out, in)
            out[f"{mine}{ours}.weight"] = sd[f"{h}{theirs}.weight"].t()
            out[f"{mine}{ours}.bias"] = sd[f"{h}{theirs}.bias"]
        for theirs, ours in (("ln_1", "norm1"), ("ln_2", "norm2")):
            out[f"{mine}{ours}.weight"] = sd[f"{h}{theirs}.weight"]
            out[f"{mine}{ours}.bias"] = sd[f"{h}{theirs}.bias"]
    return out  # attn.bias / attn.masked_bias (masks, not weights) are never copied


# ---- other right answers --------------------------------------------------------------------


def evaluate_per_token(model, ids, block_size, batch_size=64):
    """Window by window with unequal lengths grouped, the per-token losses kept in a tensor and
    averaged at the end; inference_mode instead of no_grad."""
    was_training = model.training
    model.eval()
    starts = range(0, len(ids) - 1, block_size)
    windows = [ids[s : s + block_size + 1] for s in starts]
    losses = []
    with torch.inference_mode():
        i = 0
        while i < len(windows):
            group = [windows[i]]
            i += 1
            while i < len(windows) and len(windows[i]) == len(group[0]) and len(group) < batch_size:
                group.append(windows[i])
                i += 1
            batch = torch.stack(group)  # (b, window)
            logits = model(batch[:, :-1])
            losses.append(
                F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="none"
                )
            )
    model.train(was_training)
    return float(torch.cat(losses).mean())


def train_torch_schedulers(model, batches, steps, max_lr, warmup_steps, clip=1.0):
    """Adam with torch's own schedulers: LinearLR for the warm-up, then CosineAnnealingLR, in a
    SequentialLR; zero_grad(set_to_none=False) at the top of the loop; `for ... in batches`."""
    optimizer = torch.optim.Adam(model.parameters(), lr=max_lr)
    warm = torch.optim.lr_scheduler.LinearLR(
        optimizer, start_factor=1 / warmup_steps, total_iters=warmup_steps - 1
    )
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps - warmup_steps)
    schedule = torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cosine], [warmup_steps])
    model.train()
    losses = []
    for step, (x, y) in enumerate(batches):
        if step == steps:
            break
        optimizer.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
    return losses


def train_groups_linear(model, batches, steps, max_lr, warmup_steps, clip=1.0):
    """AdamW with weight decay on the matrices only (two parameter groups), the warm-up from 0
    (step / warmup_steps), and a straight line down to max_lr / 2, the bound, at the end."""
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": matrices, "weight_decay": 0.1}, {"params": others, "weight_decay": 0.0}],
        lr=max_lr,
    )
    model.train()
    losses = []
    for step in range(steps):
        if step < warmup_steps:
            lr = max_lr * step / warmup_steps
        else:
            lr = max_lr * (1 - 0.5 * (step - warmup_steps) / (steps - 1 - warmup_steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = next(batches)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses


def gpt2_to_mine_by_rules(hf_state):
    """One pass over the keys with renaming rules, torch.split, a copy of every tensor."""
    renames = {
        "wte": "token_embedding",
        "wpe": "position_embedding",
        "ln_f": "norm",
        "ln_1": "norm1",
        "ln_2": "norm2",
        "attn.c_proj": "self_attn.out_proj",
        "mlp.c_fc": "feed_forward.linear1",
        "mlp.c_proj": "feed_forward.linear2",
    }
    out = {}
    for key, value in hf_state.items():
        key = key[len("transformer.") :] if key.startswith("transformer.") else key
        if key == "lm_head.weight" or key.split(".")[-2:] in (
            ["attn", "bias"],
            ["attn", "masked_bias"],
        ):
            continue
        parts = key.split(".")
        prefix = f"layers.{parts[1]}." if parts[0] == "h" else ""
        module, kind = ".".join(parts[2:-1] if prefix else parts[:-1]), parts[-1]
        conv = module.startswith(("attn.", "mlp."))
        if module == "attn.c_attn":
            d = value.shape[-1] // 3
            pieces = torch.split(value, d, dim=-1)
            for name, piece in zip(("q_proj", "k_proj", "v_proj"), pieces, strict=True):
                out[f"{prefix}self_attn.{name}.{kind}"] = (
                    piece.T.clone() if kind == "weight" else piece.clone()
                )
            continue
        tensor = value.T if conv and kind == "weight" else value
        out[f"{prefix}{renames[module]}.{kind}"] = tensor.clone()
    out["lm_head.weight"] = out["token_embedding.weight"]
    return out


# ---- tests ----------------------------------------------------------------------------------


def result_of(task_id, obj):
    result = check_result(task_id, obj)
    assert not isinstance(result, str), result
    return result


@pytest.mark.parametrize(
    "task_id, obj",
    [
        ("ex09.evaluate", evaluate),
        ("ex09.evaluate", evaluate_per_token),
        ("ex09.train", train),
        ("ex09.train", train_torch_schedulers),
        ("ex09.train", train_groups_linear),
        ("ex09.gpt2_to_mine", gpt2_to_mine),
        ("ex09.gpt2_to_mine", gpt2_to_mine_by_rules),
    ],
)
def test_the_learners_solution_and_other_right_answers_pass(task_id, obj):
    result = result_of(task_id, obj)
    assert result.status == "passed" and result.score == result.max_score, result.feedback


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_solutions_pass_under_other_seeds_too(seed):
    # the batch grader draws fresh cases: a right answer must pass all of them
    for task_id, obj in (("ex09.evaluate", evaluate), ("ex09.train", train)):
        task = get_task(task_id)
        cases = task.cases(torch.Generator().manual_seed(seed))
        result = judge(task, cases, run_cases(task, obj, cases))
        assert result.status == "passed", (task_id, result.feedback)


def _calls(target):
    def learner(*args, **kwargs):
        return target(*args, **kwargs)

    return learner


def _evaluate_with_lm_loss(model, ids, block_size, batch_size=64):
    from course_lib.train import lm_loss

    was = model.training
    model.eval()
    with torch.no_grad():
        loss = lm_loss(
            model, (ids[:-1].unsqueeze(0)[:, :block_size], ids[1:].unsqueeze(0)[:, :block_size])
        )
    model.train(was)
    return loss.item()


def _train_with_warmup_cosine(model, batches, steps, max_lr, warmup_steps, clip=1.0):
    from course_lib.train import WarmupCosine

    optimizer = torch.optim.AdamW(model.parameters(), lr=max_lr)
    schedule = WarmupCosine(optimizer, max_lr, max_lr / 10, warmup_steps, total_steps=steps)
    losses = []
    for _ in range(steps):
        x, y = next(batches)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(
    "task_id, obj, needle, status",
    [
        (
            "ex09.evaluate",
            "course_lib.train.evaluate_loss",
            "course_lib.train.evaluate_loss",
            "forbidden",
        ),
        ("ex09.evaluate", _evaluate_with_lm_loss, "course_lib.train.lm_loss", "forbidden"),
        ("ex09.train", "course_lib.train.train", "course_lib.train.train", "forbidden"),
        ("ex09.train", _train_with_warmup_cosine, "course_lib.train.WarmupCosine", "forbidden"),
        (
            "ex09.gpt2_to_mine",
            "course_lib.gpt2.gpt2_to_course",
            "course_lib.gpt2.gpt2_to_course",
            "forbidden",
        ),
    ],
)
def test_the_courses_own_pieces_are_not_allowed(task_id, obj, needle, status):
    from course_lib.grading.core import resolve

    learner = _calls(resolve(obj)) if isinstance(obj, str) else obj
    result = result_of(task_id, learner)
    assert result.status == status and result.score == 0, result.feedback
    assert needle in result.feedback


def test_the_task_references_are_refused_as_the_courses_own():
    from course_lib.grading.core import resolve

    for task_id in TASKS:
        result = result_of(task_id, resolve(get_task(task_id).reference))
        assert result.status == "forbidden", (task_id, result.feedback)


# ---- evaluate --------------------------------------------------------------------------------


def test_the_reference_adapter_and_the_task_share_one_gpt():
    # the model the cases build is course_lib's GPT with the hidden weights, in training mode
    task = get_task("ex09.evaluate")
    case = task.cases(torch.Generator().manual_seed(NOTEBOOK_SEED))[0]
    model = course_gpt(case.data["sizes"], case.data["state"])
    assert model.training and model.config.dropout > 0
    assert model.lm_head.weight is model.token_embedding.weight


def test_evaluate_is_told_about_modes_gradients_and_batches_from_what_it_did():
    # written differently from the listed mistakes: the verdict comes from the hooks, not
    # from equality with one wrong implementation
    def eval_mode_forgotten(model, ids, block_size, batch_size=64):
        with torch.no_grad():
            return wrong_evaluate(model.train(), ids, block_size, batch_size, mistake="no_eval")

    result = result_of("ex09.evaluate", eval_mode_forgotten)
    assert "training mode during your evaluation" in result.feedback

    def whole_text_at_once(model, ids, block_size, batch_size=64):
        return wrong_evaluate(model, ids, block_size, 10**6)

    result = result_of("ex09.evaluate", whole_text_at_once)
    assert result.status == "failed" and "more than batch_size=2" in result.feedback


def test_the_hidden_weights_make_every_window_different():
    # the mean of per-batch means differs from the mean per token only if windows differ
    gen = torch.Generator().manual_seed(0)
    sizes = dict(vocab_size=11, block_size=8, d_model=16, num_heads=2, num_layers=1)
    model = course_gpt(sizes, hidden_gpt_state(gen, sizes, torch.float32)).eval()
    ids = torch.randint(0, 11, (2, 9), generator=gen)
    with torch.no_grad():
        losses = [F.cross_entropy(model(row[None, :-1])[0], row[1:]).item() for row in ids]
    assert abs(losses[0] - losses[1]) > 0.05


# ---- train ------------------------------------------------------------------------------------


def test_train_leaves_no_global_hook_behind():
    def crashes_after_one_step(model, batches, steps, max_lr, warmup_steps, clip=1.0):
        train(model, batches, 1, max_lr, 1, clip)
        raise RuntimeError("a learner's bug")

    before = len(_global_optimizer_pre_hooks)
    assert result_of("ex09.train", train).status == "passed"
    assert "a learner's bug" in result_of("ex09.train", crashes_after_one_step).feedback
    assert len(_global_optimizer_pre_hooks) == before


def test_a_hand_written_update_is_told_to_use_torch_optim():
    def sgd_by_hand(model, batches, steps, max_lr, warmup_steps, clip=1.0):
        losses = []
        for _ in range(steps):
            x, y = next(batches)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= max_lr * p.grad
            losses.append(loss.item())
        return losses

    result = result_of("ex09.train", sgd_by_hand)
    assert result.status == "failed" and "no torch.optim optimizer stepped" in result.feedback


def test_the_loss_of_each_step_is_checked_against_the_weights_it_used():
    # the loss after the step (a second forward pass) is not the step's loss
    def loss_after_the_step(model, batches, steps, max_lr, warmup_steps, clip=1.0):
        optimizer = torch.optim.AdamW(model.parameters(), lr=max_lr)
        model.train()
        losses = []
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = max_lr * min((step + 1) / warmup_steps, 1 - step / steps)
            x, y = next(batches)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            with torch.no_grad():
                losses.append(F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item())
        return losses

    result = result_of("ex09.train", loss_after_the_step)
    assert result.status == "failed" and "at that step's weights" in result.feedback


def test_the_clip_case_binds_and_the_hidden_data_is_learnable():
    # the margins the checks rely on, measured on the reference
    task = get_task("ex09.train")
    for seed in (NOTEBOOK_SEED, 7):
        cases = task.cases(torch.Generator().manual_seed(seed))
        unclipped = task.call(
            functools.partial(train_task.wrong_train, mistake="no_clip"), cases[0]
        )
        assert min(unclipped["norms"]) > 1.5 * cases[0].data["clip"]
        assert max(unclipped["norms"]) > 1.2  # so clipping to 1.0 instead of clip is seen
        learns = [c for c in cases if c.data["learns"]]
        run = task.call(train_task.train, learns[0])
        assert sum(run["losses"][-5:]) / 5 < 0.35 * run["losses"][0]  # checked: < 0.5


def test_every_mistake_fails_with_its_own_check_under_another_seed():
    # the first failing case of each mistake fails a check no earlier row fails on that case,
    # so its hint is the one shown, whatever the seed (verdicts only: no hint search, fast)
    task = get_task("ex09.train")
    cases = task.cases(torch.Generator().manual_seed(11))
    rows = list(train_task.MISTAKES)
    codes = {}
    for name in rows:
        wrong = functools.partial(train_task.wrong_train, mistake=name)
        codes[name] = []
        for case in cases:
            try:
                v = train_task.verdict(task.call(wrong, case), case.data)
            except RuntimeError:
                v = ("raised", "")
            codes[name].append(v and v[0])
    for i, name in enumerate(rows):
        first = next(k for k, code in enumerate(codes[name]) if code is not None)
        code = codes[name][first]
        assert all(codes[rows[j]][first] != code for j in range(i)) or code == "raised", name


# ---- gpt2_to_mine -------------------------------------------------------------------------------


def test_a_missing_or_unexpected_key_is_named():
    def positions_forgotten(hf_state):
        out = gpt2_to_mine(hf_state)
        del out["position_embedding.weight"]
        out["wpe.weight"] = hf_state.get("wpe.weight", hf_state.get("transformer.wpe.weight"))
        return out

    result = result_of("ex09.gpt2_to_mine", positions_forgotten)
    assert "missing 'position_embedding.weight'" in result.feedback
    assert "unexpected 'wpe.weight'" in result.feedback


def test_the_hidden_state_dicts_have_hugging_faces_names_and_shapes():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=13, n_positions=7, n_embd=12, n_layer=2, n_head=3)
    theirs = transformers.GPT2LMHeadModel(config).state_dict()
    ours = gpt2_task.hf_gpt2_state(
        torch.Generator().manual_seed(0),
        layers=2,
        d=12,
        vocab=13,
        positions=7,
        prefix=True,
        lm_head=True,
        masks=False,
        dtype=torch.float32,
    )
    masks = ("attn.bias", "attn.masked_bias")
    weights = {k: v for k, v in theirs.items() if ".".join(k.split(".")[-2:]) not in masks}
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in weights.items()}
    # and the learner's map of Hugging Face's own state dict loads into course_lib's GPT
    from course_lib.gpt import GPT
    from course_lib.gpt2 import gpt2_config

    model = GPT(gpt2_config(vocab_size=13, block_size=7, d_model=12, num_heads=3, num_layers=2))
    model.load_state_dict(gpt2_to_mine(theirs))  # strict: every name, every shape


def test_the_map_runs_on_the_reference_adapters_output_names():
    # the reference is course_lib's map with the learner's position name; its keys are the
    # learner GPT's: course_lib's GPT's state dict with position_embedding.weight
    from course_lib.gpt import GPT
    from course_lib.gpt2 import gpt2_config

    case = get_task("ex09.gpt2_to_mine").cases(torch.Generator().manual_seed(0))[1]
    model = GPT(gpt2_config(vocab_size=13, block_size=7, d_model=12, num_heads=3, num_layers=2))
    names = {
        k.replace("position_embedding.embedding.", "position_embedding.")
        for k in model.state_dict()
    }
    assert set(gpt2_task.gpt2_to_mine(copy.copy(case.data["state"]))) == names


def test_a_loop_over_every_batch_stops_and_is_told_it_ran_too_long():
    def every_batch(model, batches, steps, max_lr, warmup_steps, clip=1.0):
        optimizer = torch.optim.AdamW(model.parameters(), lr=max_lr)
        losses = []
        for x, y in batches:  # no count of steps
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            losses.append(loss.item())
        return losses

    result = result_of("ex09.train", every_batch)
    assert result.status == "failed" and "losses for steps=30" in result.feedback
    assert train_task.MISTAKES["one_too_many"] in result.feedback


# ---- named slips an outside learner found (issue #33, item 4) -------------------------------


def evaluate_disjoint_windows(model, ids, block_size, batch_size=64):
    """Windows of block_size + 1 tokens laid back to back (window i starts at
    i * (block_size + 1)), not overlapping by one: every window's first token after the first
    is never a target."""
    was_training = model.training
    model.eval()
    width = block_size + 1
    n_full = len(ids) // width
    windows = ids[: n_full * width].reshape(n_full, width)  # (windows, block_size + 1)
    total, count = 0.0, 0
    with torch.no_grad():
        for lo in range(0, n_full, batch_size):
            chunk = windows[lo : lo + batch_size]
            logits = model(chunk[:, :-1])
            total += F.cross_entropy(
                logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum"
            ).item()
            count += chunk[:, 1:].numel()
        rest = ids[n_full * width :]
        if len(rest) > 1:
            logits = model(rest[:-1].unsqueeze(0))
            total += F.cross_entropy(logits[0], rest[1:], reduction="sum").item()
            count += len(rest) - 1
    model.train(was_training)
    return total / count


def gpt2_to_mine_in_order(order):
    """The learner's map with c_attn's three blocks given to the projections in `order`."""

    def gpt2_to_mine_reordered(hf_state):
        out = gpt2_to_mine(hf_state)
        sd = {key.removeprefix("transformer."): value for key, value in hf_state.items()}
        for i in range(1 + max(int(key.split(".")[1]) for key in sd if key.startswith("h."))):
            weights = sd[f"h.{i}.attn.c_attn.weight"].t().chunk(3, dim=0)
            biases = sd[f"h.{i}.attn.c_attn.bias"].chunk(3)
            for name, weight, bias in zip(order, weights, biases, strict=True):
                out[f"layers.{i}.self_attn.{name}_proj.weight"] = weight
                out[f"layers.{i}.self_attn.{name}_proj.bias"] = bias
        return out

    return gpt2_to_mine_reordered


def train_last_position(model, batches, steps, max_lr, warmup_steps, clip=1.0):
    """The learner's loop with the loss of the last position only."""
    optimizer = torch.optim.AdamW(model.parameters())
    model.train()
    losses = []
    for step in range(steps):
        if step < warmup_steps:
            lr = max_lr * (step + 1) / warmup_steps
        else:
            lr = (
                0.5
                * max_lr
                * (1 + math.cos(math.pi * (step - warmup_steps) / (steps - warmup_steps)))
            )
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = next(batches)
        logits = model(x)  # (batch, seq, vocab)
        loss = F.cross_entropy(logits[:, -1, :], y[:, -1])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses


def gpt2_to_mine_c_attn_untransposed(hf_state):
    """The learner's map with c_attn split along its columns but its blocks not transposed."""
    out = gpt2_to_mine(hf_state)
    sd = {key.removeprefix("transformer."): value for key, value in hf_state.items()}
    for key, weight in sd.items():
        if key.endswith("attn.c_attn.weight"):  # (d, 3 * d): W_Q | W_K | W_V, each (in, out)
            layer = key.split(".")[1]
            for name, block in zip("qkv", weight.chunk(3, dim=1), strict=True):
                out[f"layers.{layer}.self_attn.{name}_proj.weight"] = block  # no .t()
    return out


def train_with(loss_of, clip_params=None):
    """A learner's loop (AdamW, LambdaLR warm-up and cosine) with the loss `loss_of(logits, x,
    y)`, clipping `clip_params(model, params)` (default: model.parameters())."""

    def train(model, batches, steps, max_lr, warmup_steps, clip=1.0):
        params = model.parameters()  # a generator: AdamW reads it to the end
        optimizer = torch.optim.AdamW(params, lr=max_lr)

        def factor(step):
            if step < warmup_steps:
                return (step + 1) / warmup_steps
            progress = (step - warmup_steps) / (steps - warmup_steps)
            return 0.5 * (1 + math.cos(math.pi * progress))

        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        model.train()
        losses = []
        for _ in range(steps):
            x, y = next(batches)
            loss = loss_of(model(x), x, y)
            optimizer.zero_grad()
            loss.backward()
            clipped = clip_params(model, params) if clip_params else model.parameters()
            torch.nn.utils.clip_grad_norm_(clipped, clip)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
        return losses

    return train


def _every_position(logits, x, y):
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


@pytest.mark.filterwarnings("ignore:`parameters` is an empty generator")
@pytest.mark.parametrize(
    "task_id, obj, mistake",
    [
        ("ex09.gpt2_to_mine", gpt2_to_mine_c_attn_untransposed, "c_attn_not_transposed"),
        ("ex09.train", train_with(_every_position, lambda model, used: used), "no_clip"),
        ("ex09.evaluate", evaluate_disjoint_windows, "disjoint_windows"),
        ("ex09.gpt2_to_mine", gpt2_to_mine_in_order("kqv"), "qkv_order"),
        ("ex09.gpt2_to_mine", gpt2_to_mine_in_order("vkq"), "qkv_order"),
        ("ex09.gpt2_to_mine", gpt2_to_mine_in_order("kvq"), "qkv_order"),
        ("ex09.train", train_last_position, "last_position"),
    ],
)
def test_an_outside_learners_slip_gets_its_own_named_hint(task_id, obj, mistake):
    # each got no hint, or another mistake's, before its row was listed
    table = {"ex09.evaluate": evaluate_task, "ex09.train": train_task}.get(task_id, gpt2_task)
    result = result_of(task_id, obj)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert f"Hint: {table.MISTAKES[mistake]}" in result.feedback


def test_a_loss_against_the_wrong_targets_is_not_told_it_summed():
    # the targets taken from x (not y) got the summed loss's hint, "the MEAN ... not the sum"
    assert result_of("ex09.train", train_with(_every_position)).status == "passed"
    targets_are_inputs = train_with(lambda logits, x, y: _every_position(logits, x, x))
    result = result_of("ex09.train", targets_are_inputs)
    assert result.status == "failed" and "but the mean cross-entropy" in result.feedback
    assert "Hint" not in result.feedback, result.feedback


def test_an_evaluate_that_divides_by_every_token_is_named():
    # total / len(ids): the first token counted as a prediction ("your loss is ..., expected ...")
    def evaluate_over_len(model, ids, block_size, batch_size=64):
        was_training = model.training
        model.eval()
        total = 0.0
        with torch.no_grad():
            starts = range(0, len(ids) - 1, block_size)
            windows = [ids[s : s + block_size + 1] for s in starts]
            for lo in range(0, len(windows), batch_size):
                for window in windows[lo : lo + batch_size]:  # one window at a time
                    logits = model(window[None, :-1])[0]
                    total += F.cross_entropy(logits, window[1:], reduction="sum").item()
        model.train(was_training)
        return total / len(ids)

    result = result_of("ex09.evaluate", evaluate_over_len)
    assert result.status == "failed", result.feedback
    assert f"Hint: {evaluate_task.MISTAKES['count_all_tokens']}" in result.feedback


def gpt2_to_mine_with(slip):
    """#hunt3: the learner's map with one slip: "prefix" (lm_head's tensor looked up by its
    bare name) or "linear_untransposed" (c_attn transposed, c_proj and c_fc left (in, out))."""

    def gpt2_to_mine_slipped(hf_state):
        if slip == "prefix":  # KeyError: 'wte.weight' when the keys start with 'transformer.'
            return {**gpt2_to_mine(hf_state), "lm_head.weight": hf_state["wte.weight"]}
        out = gpt2_to_mine(hf_state)
        for key in out:
            if key.endswith(("out_proj.weight", "linear1.weight", "linear2.weight")):
                out[key] = out[key].t()
        return out

    return gpt2_to_mine_slipped


@pytest.mark.parametrize(
    "slip, mistake", [("prefix", "prefix_kept"), ("linear_untransposed", "not_transposed")]
)
def test_third_hunt_map_slips_are_named(slip, mistake):
    # #hunt3: "your code raised KeyError: 'wte.weight'" / "holds other numbers", without a hint
    result = result_of("ex09.gpt2_to_mine", gpt2_to_mine_with(slip))
    assert result.status == "failed", result.feedback
    assert f"Hint: {gpt2_task.MISTAKES[mistake]}" in result.feedback, result.feedback


def gpt2_to_mine_qkv_reshaped(hf_state):
    """#hunt4: the fused c_attn weight (d, 3d) cut with reshape(3, d, d), no transpose."""
    out = gpt2_to_mine(hf_state)
    for key, weight in hf_state.items():
        if key.endswith("attn.c_attn.weight"):
            layer = key.removeprefix("transformer.").split(".")[1]
            blocks = weight.reshape(3, weight.shape[0], weight.shape[0])
            for name, block in zip("qkv", blocks, strict=True):
                out[f"layers.{layer}.self_attn.{name}_proj.weight"] = block
    return out


def test_a_fused_qkv_cut_by_reshape_is_named():
    # #hunt4: "holds other numbers than GPT-2's weight", without a hint
    result = result_of("ex09.gpt2_to_mine", gpt2_to_mine_qkv_reshaped)
    assert result.status == "failed", result.feedback
    assert f"Hint: {gpt2_task.MISTAKES['qkv_reshaped']}" in result.feedback, result.feedback


def gpt2_to_mine_in_place(slip):
    """#hunt5: a map that pops the mask buffers from hf_state, or transposes c_fc in place."""

    def learner(hf_state):
        for key in list(hf_state):
            rest = key.removeprefix("transformer.").split(".", 2)[-1]
            if slip == "pop" and rest in ("attn.bias", "attn.masked_bias"):
                hf_state.pop(key)
            elif slip == "t_" and rest == "mlp.c_fc.weight":
                hf_state[key].t_()  # now (out, in): nn.Linear's layout
        out = gpt2_to_mine(hf_state)
        for key in out:
            if slip == "t_" and key.endswith("linear1.weight"):
                out[key] = out[key].t()  # this learner's map leaves c_fc as it finds it
        return out

    return learner


@pytest.mark.parametrize("slip", ["pop", "t_"])
def test_a_map_that_changes_the_state_dict_it_was_given_fails(slip):
    # #hunt5: both passed all 4 checks (each case got a copy, never compared after the call)
    result = result_of("ex09.gpt2_to_mine", gpt2_to_mine_in_place(slip))
    assert result.status == "failed", result.feedback
    assert "changed its input `hf_state` in place" in result.feedback


def evaluate_window_by_window(slip):
    """#hunt5: one window at a time, with the mean of the window means or the loss in bits."""

    def learner(model, ids, block_size, batch_size=64):
        was_training = model.training
        model.eval()
        losses, count = [], 0
        with torch.no_grad():
            for start in range(0, len(ids) - 1, block_size):
                window = ids[start : start + block_size + 1]
                logits = model(window[None, :-1])[0]  # (n, vocab)
                losses.append(F.cross_entropy(logits, window[1:], reduction="sum").item())
                count += len(window) - 1
                if slip == "window_means":
                    losses[-1] /= len(window) - 1
        model.train(was_training)
        if slip == "window_means":
            return sum(losses) / len(losses)
        return sum(losses) / count / math.log(2)

    return learner


@pytest.mark.parametrize("slip", ["window_means", "bits"])
def test_an_evaluate_in_bits_or_by_window_means_is_named(slip):
    # #hunt5: each got only "your loss is ..., expected ..." with no hint
    result = result_of("ex09.evaluate", evaluate_window_by_window(slip))
    assert result.status == "failed", result.feedback
    assert f"Hint: {evaluate_task.MISTAKES[slip]}" in result.feedback, result.feedback


def test_a_loop_that_takes_two_batches_a_step_is_told_to_take_one():
    # #hunt5: x from one next(batches), y from another: a bare "raised StopIteration"
    def two_batches_a_step(model, batches, steps, max_lr, warmup_steps, clip=1.0):
        optimizer = torch.optim.AdamW(model.parameters(), lr=max_lr)
        losses = []
        for _ in range(steps):
            x, y = next(batches)[0], next(batches)[1]
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    result = result_of("ex09.train", two_batches_a_step)
    assert result.status == "failed", result.feedback
    assert "exactly one batch per step" in result.feedback, result.feedback


def test_gpt2_small_s_12_layers_hard_coded_are_told_to_count_the_layers():
    # hunt 5: range(12) got a bare "KeyError: 'h.1.ln_1.weight'"
    result = check_result("ex09.gpt2_to_mine", functools.partial(gpt2_to_mine, num_layers=12))
    assert result.status == "failed", result.feedback
    assert "this state dict has 1 layer (h.0): count the layers" in result.feedback


def _gpt2_to_mine_layers_by(slip):
    """The learner's map, with each layer's number read from its key as the slip reads it."""

    def gpt2_to_mine_by_layer_names(hf_state):
        right = gpt2_to_mine(hf_state)
        out = {k: v for k, v in right.items() if not k.startswith("layers.")}
        names = sorted({k.split(".")[1] for k in right if k.startswith("layers.")})  # as text
        for i, name in enumerate(names):
            if slip == "one digit" and len(name) > 1:  # re.match(r"h\.(\d)\.", key)
                continue
            sources = [n for n in names if n.startswith(name)] if slip == "startswith" else [name]
            index = i if slip == "sorted" else int(name)
            for n in sources:  # key.startswith(f"h.{name}"): the last layer read wins
                layer = {k: v for k, v in right.items() if k.startswith(f"layers.{n}.")}
                out |= {k.replace(f"layers.{n}.", f"layers.{index}."): v for k, v in layer.items()}
        return out

    return gpt2_to_mine_by_layer_names


@pytest.mark.parametrize("slip", ["sorted", "startswith", "one digit"])
def test_gpt2_small_s_two_digit_layers_are_read_as_numbers(slip):
    # hunt 6: with the checks' 1 or 2 layers, these three maps got full marks
    result = result_of("ex09.gpt2_to_mine", _gpt2_to_mine_layers_by(slip))
    assert result.status == "failed" and "int(key.split('.')[1])" in result.feedback, result
    assert result_of("ex09.gpt2_to_mine", _gpt2_to_mine_layers_by("")).status == "passed"


def evaluate_padding_the_last_window(model, ids, block_size, batch_size=64):
    """The learner's evaluate on the text with token 0 appended to fill the last window."""
    missing = -(len(ids) - 1) % block_size  # to make the last window block_size + 1 long
    return evaluate(model, F.pad(ids, (0, missing)), block_size, batch_size)


def test_a_last_window_padded_to_full_length_is_named():
    # hunt 6: "your loss is 2.90461 nats per token, expected 2.95669" with no hint
    result = result_of("ex09.evaluate", evaluate_padding_the_last_window)
    assert result.status == "failed", result.feedback
    assert evaluate_task.MISTAKES["padded_last"] in result.feedback, result.feedback


def evaluate_unfold_and_split(model, ids, block_size, batch_size=64):
    """Another right answer: unfold the full windows, split them into batches (a text shorter
    than one window gives one empty batch), then the rest."""
    was_training, n_full = model.training, (len(ids) - 1) // block_size
    full = ids[: n_full * block_size + 1]
    windows = (
        full.unfold(0, block_size + 1, block_size) if n_full else full.new_zeros(0, block_size + 1)
    )
    rest, total = ids[n_full * block_size :], 0.0
    model.eval()
    with torch.no_grad():
        for batch in (
            [*windows.split(batch_size), rest[None]] if len(rest) > 1 else windows.split(batch_size)
        ):
            logits = model(batch[:, :-1])
            total += F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum")
    model.train(was_training)
    return total.item() / (len(ids) - 1)


def test_an_empty_batch_of_no_full_windows_is_no_error():
    # hunt 6: the check's model refused the empty batch ("ids is empty"): 5/6 for a right answer
    assert result_of("ex09.evaluate", evaluate_unfold_and_split).status == "passed"


# ---- hunt 8 (h8b) ----------------------------------------------------------------------------


def _h8_train(slip):
    """#hunt8: a learner's loop with one slip: "peek", a look at the loss in eval mode halfway
    (as lesson 09's loop does) and no model.train() after it; "late_lr", each step's rate set
    after its optimizer.step(); "by_value", the gradients clipped entry by entry; "shift", the
    targets shifted once more; "lambda_rate", LambdaLR given the rate, not a factor."""

    def rate(step, steps, max_lr, warmup_steps):
        progress = max(0, step - warmup_steps) / (steps - warmup_steps)
        return max_lr * min((step + 1) / warmup_steps, 0.5 + 0.5 * math.cos(math.pi * progress))

    def train(model, batches, steps, max_lr, warmup_steps, clip=1.0):
        optimizer = torch.optim.AdamW(model.parameters(), lr=max_lr)
        if slip == "lambda_rate":  # the rate where LambdaLR wants a factor
            scheduler = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda step: rate(step, steps, max_lr, warmup_steps)
            )
        model.train()
        losses = []
        for step in range(steps):
            for group in optimizer.param_groups if slip not in ("late_lr", "lambda_rate") else ():
                group["lr"] = rate(step, steps, max_lr, warmup_steps)
            x, y = next(batches)
            if slip == "shift":  # lesson 08's shift, on targets already shifted
                y = y[:, 1:]
            loss = F.cross_entropy(model(x)[:, : y.shape[1]].flatten(0, 1), y.flatten())
            optimizer.zero_grad()
            loss.backward()
            if slip == "by_value":
                torch.nn.utils.clip_grad_value_(model.parameters(), clip)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            if slip == "lambda_rate":
                scheduler.step()
            for group in optimizer.param_groups if slip == "late_lr" else ():
                group["lr"] = rate(step + 1, steps, max_lr, warmup_steps)
            losses.append(loss.item())
            if slip == "peek" and step == steps // 2:
                model.eval()
        return losses

    return train


@pytest.mark.parametrize(
    "slip, words",
    [  # before: no hint; "clip the gradients", "start with a warm-up" (as if absent); no hint
        ("peek", "a model.eval() inside the loop"),
        ("by_value", "clip_grad_value_ caps each entry"),
        ("late_lr", "set each step's rate before its optimizer.step()"),
        ("shift", "y is already x shifted by one token"),
        ("lambda_rate", "return the factor, (step + 1) / warmup_steps, not the rate"),
    ],
)
def test_a_loop_with_a_hunt8_slip_is_told_what_it_did(slip, words):
    result = result_of("ex09.train", _h8_train(slip))
    assert result.status == "failed" and words in result.feedback, result.feedback


def test_the_hunt8_loop_without_its_slip_passes():
    assert result_of("ex09.train", _h8_train("")).status == "passed"
