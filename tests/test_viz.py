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


def test_line_plot_has_title_and_labels():
    ax = line_plot({"loss": [3, 2, 1]}, xlabel="step", ylabel="loss", title="falls")
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("step", "loss", "falls")
    plt.close("all")


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: attention_heatmap("oops"), TypeError, "weights must be a tensor"),
        (lambda: attention_heatmap(torch.ones(2, 2, 2)), ValueError, "weights must be 2-D"),
        (lambda: attention_heatmap(torch.ones(2, 3), ["a"], ["x", "y", "z"]), ValueError,
         "1 query labels"),
        (lambda: head_grid(torch.ones(2, 2)), ValueError, r"\(num_heads, n_q, n_k\)"),
    ],
)
def test_bad_input_gets_a_message_that_names_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call()
