"""ex10.patchify: images to a sequence of patches, row by row."""

from __future__ import annotations

import torch

from ...core import Case, Task, register
from ..common import randn

LESSON = "lesson 10"

FAULTS = {
    "plain_reshape": (
        "a reshape alone reads pixels in memory order, so a 'patch' is a strip of rows, "
        "not a square: split H and W into (H/p, p) and (W/p, p), then permute the "
        "patch-grid axes in front"
    ),
    "column_major": (
        "the patches are read column by column: read them row by row (all patches of the "
        "top row, left to right, then the next row)"
    ),
    "channels_last": (
        "inside a patch the channels come last; flatten each patch as (channels, row, "
        "column), like a Conv2d kernel"
    ),
    "transposed": (
        "each patch is transposed: flatten it row by row (the pixel row before the pixel column)"
    ),
    "grid_last": (
        "your patch-grid axes come last, (b, c, p, p, H/p, W/p), and a reshape of that to "
        "(b, num_patches, c * p * p) mixes pixels of different patches: bring the grid axes to "
        "the front, permute(0, 2, 4, 1, 3, 5) (or transpose a (b, c * p * p, num_patches))"
    ),
    "channels_before_grid": (
        "the channel axis is still in front of the patch grid, (b, c, H/p, W/p, p, p), so a "
        "reshape to (b, num_patches, c * p * p) cuts each channel's grid into 'patches' of "
        "pixels from different patches: bring the grid axes before the channel, "
        "permute(0, 2, 4, 1, 3, 5) after reshape(b, c, H/p, p, W/p, p) (after "
        "Tensor.unfold twice, permute(0, 2, 3, 1, 4, 5))"
    ),
    "strided": (
        "your 'patches' gather pixels spread over the whole image, H/p apart: split H into "
        "(H/p, p), the patch's row in the grid first and the pixel row inside it second, "
        "reshape(b, c, H/p, p, W/p, p), not (p, H/p)"
    ),
    "strided_lesson_order": (
        "your 'patches' gather pixels spread over the whole image, H/p apart: "
        "reshape(b, c, p, H/p, p, W/p) splits H as (p, H/p), so permute(0, 2, 4, 1, 3, 5) "
        "brings the pixel-in-patch axes to the front, not the patch grid; split H into (H/p, p), "
        "the patch's row in the grid first, reshape(b, c, H/p, p, W/p, p)"
    ),
    "grid_swapped": (
        "the patch grid is split as (W/p, H/p): images are (batch, channels, H, W), so H "
        "(shape[2]) splits into (H/p, p) first and W (shape[3]) into (W/p, p) after it; a "
        "square image hides the swap"
    ),
    "square_grid": (
        "H and W may differ (the first images are 8 x 12): count the patches down, H // p, "
        "and across, W // p, separately, reshape(b, c, H // p, p, W // p, p)"
    ),
    "one_channel": (
        "the images may have several channels (the first ones have 3): take c from "
        "images.shape, not the 1 of the lesson's grey images"
    ),
    "true_division": (
        "H / p is a float in Python 3, and reshape takes ints: use integer division, H // p"
    ),
}

_ORDERS = {
    "column_major": (0, 4, 2, 1, 3, 5),
    "channels_last": (0, 2, 4, 3, 5, 1),
    "transposed": (0, 2, 4, 1, 5, 3),
    "grid_last": (0, 1, 3, 5, 2, 4),
    "channels_before_grid": (0, 1, 2, 4, 3, 5),
    "strided": (0, 3, 5, 1, 2, 4),  # the order that fits a (p, H/p) split; the lesson's does not
}


def wrong_patches(images, p, *, mistake):
    """(batch, channels, H, W) -> (batch, patches, channels * p * p), with the named mistake."""
    b, c, h, w = images.shape
    c = 1 if mistake == "one_channel" else c
    if mistake == "plain_reshape":
        return images.reshape(b, -1, c * p * p)
    if mistake.startswith("strided"):  # split as (p, H/p): pixels H/p apart in one "patch"
        x = images.reshape(b, c, p, h // p, p, w // p).permute(
            *_ORDERS.get(mistake, (0, 2, 4, 1, 3, 5))
        )
    else:
        rows, cols = (w // p, h // p) if mistake == "grid_swapped" else (h // p, w // p)
        if mistake == "true_division":
            rows = h / p
        if mistake == "square_grid":  # one count for both sides
            cols = rows
        x = images.reshape(b, c, rows, p, cols, p).permute(
            *_ORDERS.get(mistake, (0, 2, 4, 1, 3, 5))
        )
    return x.reshape(b, (h // p) * (w // p), c * p * p)


@register
class Patchify(Task):
    id = "ex10.patchify"
    lesson = f"{LESSON}, section 'ViT: an image is a sequence of patches'"
    reference = "course_lib.family.patchify"
    forbidden = ("torch.nn.functional.unfold", "torch.nn.Unfold")

    def cases(self, gen):
        def case(description, shape, patch_size, dtype=torch.float32, raises=None):
            return Case(description, (randn(gen, *shape, dtype=dtype), patch_size), raises=raises)

        # fmt: off
        return [
            case("images (2, 3, 8, 12), patch_size=4 (2 x 3 patches)", (2, 3, 8, 12), 4),
            case("images (1, 1, 4, 4), patch_size=2", (1, 1, 4, 4), 2),
            case("images (3, 2, 6, 6), patch_size=3, float64", (3, 2, 6, 6), 3, torch.float64),
            case("images (2, 3, 4, 6), patch_size=1 (every pixel a patch)", (2, 3, 4, 6), 1),
            case("images (2, 2, 5, 5), patch_size=5 (one patch)", (2, 2, 5, 5), 5),
            case("images (1, 1, 4, 8), patch_size=2 (wider than tall)", (1, 1, 4, 8), 2),
            case("images (1, 4, 9, 3), patch_size=3 (taller than wide)", (1, 4, 9, 3), 3),
            # #f10: a table of indices kept from an earlier call of the same image size
            case("images (2, 3, 8, 12) again, patch_size=2: the first case's size with smaller "
                 "patches (nothing kept from an earlier call may decide the patches)",
                 (2, 3, 8, 12), 2),
            case("H=10 is not a multiple of patch_size=4: must raise a ValueError",
                 (1, 1, 10, 8), 4, raises=ValueError),
            case("W=6 is not a multiple of patch_size=4: must raise a ValueError",
                 (1, 1, 8, 6), 4, raises=ValueError),
        ]
        # fmt: on

    mistake_table, wrong = FAULTS, staticmethod(wrong_patches)

    def diagnose(self, got, want, case):  # #f10: the index table of the first case (p=4) reused
        images, p = case.args
        if p == 2 and images.shape[-2:] == (8, 12) and isinstance(got, torch.Tensor):
            first = wrong_patches(images, 4, mistake="")  # its patches, read with p=2's shape
            if got.shape == want.shape and torch.equal(got, first.reshape(want.shape)):
                return (
                    "these are the 4 x 4 patches of an earlier call with the same image size, "
                    "cut again into rows of c * 2 * 2: a table of indices (or a result) kept "
                    "between calls was reused for another patch_size; build it afresh in each "
                    "call, or key what you keep by the image size AND patch_size"
                )
        return None
