"""Seeding, device choice, the input checks shared by every module, the ex00 references."""

import pytest
import torch

from course_lib.runtime import environment_report, get_device, seed_everything
from course_lib.tensor_basics import batched_matmul, last_token, pairwise_sq_distances
from course_lib.validation import check_bool_mask, check_positive_int, check_tensor


def test_seed_everything_makes_runs_repeat():
    seed_everything(3)
    first = torch.randn(4)
    seed_everything(3)
    assert torch.equal(first, torch.randn(4))
    with pytest.raises(ValueError, match="seed"):
        seed_everything(-1)


def test_device_follows_the_environment_variable(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    monkeypatch.delenv("COURSE_DEVICE")
    assert get_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            get_device("cuda")


def test_an_unknown_device_name_is_named(monkeypatch):
    # before: get_device("tpu") raised torch's "Expected one of cpu, cuda, ipu, xpu, mkldnn,
    # opengl, ... device type at start of device string: tpu"; get_device(0) silently gave the
    # default device (0 is falsy) and get_device(torch.device("cpu")) an AttributeError
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    for name in ("tpu", "GPU", "cuda:x", "meta"):
        with pytest.raises(ValueError, match=f"prefer='{name}' is not a device the course runs"):
            get_device(name)
    with pytest.raises(TypeError, match="prefer must be a device name"):
        get_device(0)
    assert get_device(torch.device("cpu")) == torch.device("cpu") == get_device("cpu")
    monkeypatch.setenv("COURSE_DEVICE", "gpu")
    with pytest.raises(ValueError, match="COURSE_DEVICE='gpu' is not a device"):
        get_device()
    monkeypatch.setenv("COURSE_DEVICE", "")  # set but empty: the default
    assert get_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.backends.mps.is_available():
        with pytest.raises(ValueError, match="no Apple GPU"):
            get_device("mps")
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="numbered from cuda:0"):
            get_device(f"cuda:{torch.cuda.device_count()}")


def test_environment_report_names_the_essentials():
    assert {"python", "torch", "device", "course_lib"} <= set(environment_report())


def test_validation_messages_name_the_argument_and_the_shapes():
    with pytest.raises(
        ValueError, match=r"q must have 3 dimensions \(batch, seq, d\), got shape \(2, 3\)"
    ):
        check_tensor(torch.zeros(2, 3), "q", ndim=3, shape_hint="(batch, seq, d)")
    with pytest.raises(TypeError, match="ids must have dtype int64"):
        check_tensor(torch.zeros(2), "ids", dtype=torch.int64)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        check_tensor([1, 2], "x")
    with pytest.raises(ValueError, match="x is empty"):
        check_tensor(torch.zeros(0, 3), "x")
    with pytest.raises(ValueError, match="num_heads must be a positive int"):
        check_positive_int(0, "num_heads")
    with pytest.raises(TypeError, match="mask must have dtype bool"):
        check_bool_mask(torch.ones(3, 3), "mask", (3, 3), "(n_q, n_k)")
    with pytest.raises(ValueError, match=r"does not broadcast .* \(n_q, n_k\)"):
        check_bool_mask(torch.ones(4, 4, dtype=torch.bool), "mask", (3, 5), "(n_q, n_k)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ex00_references_equal_torch(dtype):
    a, b = torch.randn(2, 1, 3, 4, dtype=dtype), torch.randn(5, 4, 6, dtype=dtype)
    torch.testing.assert_close(batched_matmul(a, b), a @ b)
    x, y = torch.randn(2, 3, 4, dtype=dtype), torch.randn(2, 5, 4, dtype=dtype)
    torch.testing.assert_close(pairwise_sq_distances(x, y), torch.cdist(x, y) ** 2)
    x = torch.randn(3, 5, 2, dtype=dtype)
    assert torch.equal(
        last_token(x, torch.tensor([5, 1, 3])), torch.stack([x[0, 4], x[1, 0], x[2, 2]])
    )
    with pytest.raises(ValueError, match="every length must be in 1..5"):
        last_token(x, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="must agree on k"):
        batched_matmul(torch.randn(2, 3), torch.randn(4, 5))
    # before: "The size of tensor a (2) must match the size of tensor b (3) at non-singleton
    # dimension 0", from the product inside
    with pytest.raises(ValueError, match=r"batch dimensions of a \(2,\) and b \(3,\)"):
        batched_matmul(torch.randn(2, 3, 4), torch.randn(3, 4, 6))
    with pytest.raises(ValueError, match=r"batch dimensions of x \(2,\) and y \(3,\)"):
        pairwise_sq_distances(torch.randn(2, 3, 4), torch.randn(3, 5, 4))


def test_set_threads_defaults_to_one_and_follows_course_threads(monkeypatch):
    from course_lib.runtime import set_threads

    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("COURSE_THREADS", raising=False)
        assert set_threads() == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("COURSE_THREADS", "2")
        assert set_threads() == 2 and torch.get_num_threads() == 2
        monkeypatch.setenv("COURSE_THREADS", "many")
        with pytest.raises(ValueError, match="COURSE_THREADS must be a positive integer"):
            set_threads()
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match="threads must be a positive int"):
                set_threads(bad)
    finally:
        torch.set_num_threads(before)
