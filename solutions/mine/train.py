"""Your own code from the exercises: the cells marked `# save in mine/train.py`.

Edit those cells in their notebook, not this file: running a marked cell rewrites its part
below (between its ">>> cell" and "<<< cell" lines) and keeps the others. Later exercises use
these pieces through `mine("exNN.name")`, which checks them first.
"""
# ruff: noqa
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.mine import mine


# >>> cell: train
# save in mine/train.py
def train(model, batches, steps, max_lr, warmup_steps, clip=1.0):
    """Train `model` for `steps` steps on `batches` ((x, y) long (batch, seq) pairs).
    Returns the `steps` losses, floats.
    """
    ### BEGIN SOLUTION
    from tqdm.auto import tqdm

    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": matrices, "weight_decay": 0.1}, {"params": vectors, "weight_decay": 0.0}],
        lr=max_lr,
        betas=(0.9, 0.99),
    )

    def factor(step):  # of max_lr: linear warm-up, then cosine down to a tenth
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, steps - warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    model.train()
    losses = []
    for _ in tqdm(range(steps), desc="training", unit=" steps", mininterval=1.0):
        x, y = next(batches)  # (batch, seq) each
        logits = model(x)  # (batch, seq, vocab)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses
    ### END SOLUTION
# <<< cell: train


# >>> cell: evaluate
# save in mine/train.py
def evaluate(model, ids, block_size, batch_size=64):
    """Mean cross-entropy (nats per token) of model's next-token predictions over all of ids."""
    ### BEGIN SOLUTION
    was_training = model.training
    model.eval()
    n_full = (len(ids) - 1) // block_size
    inputs = ids[: n_full * block_size].reshape(n_full, block_size)  # (windows, block_size)
    targets = ids[1 : n_full * block_size + 1].reshape(n_full, block_size)
    total, count = 0.0, 0
    with torch.no_grad():
        for lo in range(0, n_full, batch_size):
            logits = model(inputs[lo : lo + batch_size])  # (b, block_size, vocab)
            y = targets[lo : lo + batch_size]
            total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
        rest = ids[n_full * block_size :]  # the last, shorter window
        if len(rest) > 1:
            logits = model(rest[:-1].unsqueeze(0))  # (1, len(rest) - 1, vocab)
            total += F.cross_entropy(logits[0], rest[1:], reduction="sum").item()
            count += len(rest) - 1
    model.train(was_training)
    return total / count
    ### END SOLUTION
# <<< cell: evaluate
