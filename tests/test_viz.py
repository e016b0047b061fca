"""The shared figures: labelled, and clear errors on bad input."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_lib.viz import attention_heatmap, head_grid, line_plot  # noqa: E402


def test_heatmap_labels_axes_and_tokens():
    ax = attention_heatmap(torch.softmax(torch.randn(3, 4), -1), ["a", "b", "c"], list("wxyz"))
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wxyz")
    plt.close("all")


def test_head_grid_draws_one_panel_per_head():
    fig = head_grid(torch.softmax(torch.randn(3, 2, 2), -1), ["a", "b"], ["a", "b"], cols=2)
    assert sum(ax.has_data() for ax in fig.axes) == 3
    plt.close("all")


def test_heatmap_scale_runs_to_its_own_maximum_by_default_and_to_vmax_when_given():
    weights = torch.tensor([[0.2, 0.3], [0.1, 0.4]])
    assert attention_heatmap(weights).images[0].get_clim() == pytest.approx((0.0, 0.4))
    assert attention_heatmap(weights, vmax=1.0).images[0].get_clim() == (0.0, 1.0)
    plt.close("all")


def test_heatmap_annotations_turn_white_relative_to_vmax():
    weights = torch.tensor([[0.5, 0.1]])
    own_scale = [t.get_color() for t in attention_heatmap(weights, annotate=True).texts]
    shared = [t.get_color() for t in attention_heatmap(weights, annotate=True, vmax=1.0).texts]
    assert own_scale == ["white", "black"]  # 0.5 is the darkest cell of its own scale
    assert shared == ["black", "black"]  # but pale on a 0-1 scale
    plt.close("all")


def test_head_grid_default_keeps_one_scale_per_panel_and_no_colorbar():
    weights = torch.stack([torch.full((2, 2), 0.5), torch.eye(2)])  # (heads, n_q, n_k)
    fig = head_grid(weights, cols=2)
    assert len(fig.axes) == 2  # no colour bar
    assert [ax.images[0].get_clim() for ax in fig.axes] == [(0.0, 0.5), (0.0, 1.0)]
    plt.close("all")


@pytest.mark.parametrize("vmax, top", [(1.0, 1.0), (None, 0.6)])
def test_head_grid_shared_scale_with_one_colorbar(vmax, top):
    weights = torch.stack([torch.full((2, 2), 0.5), torch.full((2, 2), 0.6)])
    fig = head_grid(weights, cols=2, vmax=vmax, colorbar=True)
    panels, colorbars = fig.axes[:2], fig.axes[2:]
    assert len(colorbars) == 1 and colorbars[0].get_ylabel() == "weight"
    assert [ax.images[0].get_clim() for ax in panels] == [pytest.approx((0.0, top))] * 2
    plt.close("all")


def test_head_grid_vmax_without_colorbar_shares_the_scale():
    weights = torch.stack([torch.full((2, 2), 0.5), torch.eye(2)])
    fig = head_grid(weights, cols=2, vmax=1.0)
    assert len(fig.axes) == 2
    assert [ax.images[0].get_clim() for ax in fig.axes] == [(0.0, 1.0), (0.0, 1.0)]
    plt.close("all")


def test_line_plot_has_title_and_labels():
    ax = line_plot({"loss": [3, 2, 1]}, xlabel="step", ylabel="loss", title="falls")
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("step", "loss", "falls")
    plt.close("all")


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: attention_heatmap("oops"), TypeError, "weights must be a tensor"),
        (lambda: attention_heatmap(torch.ones(2, 2, 2)), ValueError, "weights must be 2-D"),
        (
            lambda: attention_heatmap(torch.ones(2, 3), ["a"], ["x", "y", "z"]),
            ValueError,
            "1 query labels",
        ),
        (lambda: head_grid(torch.ones(2, 2)), ValueError, r"\(num_heads, n_q, n_k\)"),
        (
            lambda: attention_heatmap(torch.ones(2, 2), vmax=0.0),
            ValueError,
            "vmax must be positive",
        ),
        (lambda: attention_heatmap(torch.ones(2, 2), vmax="1"), TypeError, "vmax must be a number"),
        (lambda: head_grid(torch.ones(2, 2, 2), vmax=-1.0), ValueError, "vmax must be positive"),
        (lambda: head_grid(torch.ones(2, 2, 2), vmax=True), TypeError, "vmax must be a number"),
    ],
)
def test_bad_input_gets_a_message_that_names_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_line_plot_names_a_list_in_place_of_the_dict_and_a_short_x():
    # before: "'list' object has no attribute 'items'", and matplotlib's "x and y must have same
    # first dimension, but have shapes (2,) and (3,)"
    with pytest.raises(TypeError, match=r"series must be a dict of named curves, e.g. \{'train'"):
        line_plot([3, 2, 1], xlabel="step", ylabel="loss", title="falls")
    with pytest.raises(ValueError, match=r"x has 2 values but series\['loss'\] has 3"):
        line_plot({"loss": [3, 2, 1]}, x=[1, 2], xlabel="step", ylabel="loss", title="falls")
    plt.close("all")
