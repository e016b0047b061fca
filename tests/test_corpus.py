"""The shipped Shakespeare corpus, the 90/10 split and the random training windows."""

import pytest
import torch

from course_lib.datasets import load_shakespeare, random_windows, train_val_split, window_batches


def test_corpus_is_shipped_plain_dialogue():
    text = load_shakespeare()
    assert 1_000_000 < len(text) < 1_200_000
    assert len(set(text)) == 72
    assert text.startswith("Ber.\nWho's there?")
    assert "Gutenberg" not in text and "[Enter" not in text and "\t" not in text
    assert "\n\n\n" not in text and not any(line != line.strip() for line in text.split("\n"))
    assert "To be, or not to be" in text


def test_split_is_by_position_90_10():
    ids = torch.arange(1000)
    train, val = train_val_split(ids)
    assert len(train) == 900 and len(val) == 100
    assert torch.equal(torch.cat([train, val]), ids)


@pytest.mark.parametrize("bad, match", [(torch.arange(3), "too few"), (torch.zeros(2, 5), "ids")])
def test_split_rejects_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        train_val_split(bad)


def test_split_rejects_bad_fraction():
    with pytest.raises(ValueError, match="val_fraction"):
        train_val_split(torch.arange(100), 1.5)


def test_random_windows_targets_are_inputs_shifted_by_one():
    ids = torch.arange(100)
    x, y = random_windows(ids, 8, 5, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 8) and x.dtype == torch.long
    assert torch.equal(y, x + 1)  # consecutive ids: the next token is the id + 1
    assert torch.equal(x[:, 1:], x[:, :-1] + 1)


def test_random_windows_are_seeded_and_cover_the_end():
    ids = torch.arange(20)
    a = random_windows(ids, 4, 500, torch.Generator().manual_seed(1))
    b = random_windows(ids, 4, 500, torch.Generator().manual_seed(1))
    assert torch.equal(a[0], b[0])
    assert a[1].max() == 19 and a[0].min() == 0  # the first and the last token are reachable


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(ids=torch.arange(5), block_size=5, batch_size=1), ValueError, "block_size"),
        (dict(ids=torch.arange(50), block_size=0, batch_size=1), ValueError, "block_size"),
        (dict(ids=torch.arange(50), block_size=4, batch_size=0), ValueError, "batch_size"),
        (dict(ids=torch.rand(50), block_size=4, batch_size=2), TypeError, "ids"),
    ],
)
def test_random_windows_rejects_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        random_windows(**kwargs)


def test_window_batches_checks_at_once_and_streams():
    with pytest.raises(ValueError, match="batch_size"):
        window_batches(torch.arange(50), 4, 0)
    stream = window_batches(torch.arange(50), 4, 3, torch.Generator().manual_seed(0))
    first, second = next(stream), next(stream)
    assert first[0].shape == (3, 4) and not torch.equal(first[0], second[0])


class _GeneratorOn:
    """Stands in for a torch.Generator made on another device (a GPU's), on any machine."""

    def __init__(self, device):
        self.device = torch.device(device)


def test_windows_draw_on_the_generators_device_whatever_the_datas(monkeypatch):
    # Lesson 09 passes a generator made on `device`: on a GPU machine a CUDA generator, which
    # cannot draw CPU numbers. The draw must happen on the generator's device, and the windows
    # land on the data's device. torch.randint is replaced by a stand-in that fails the way
    # PyTorch does when the two devices differ.
    import course_lib.datasets as corpus

    real, asked = torch.randint, []

    def randint(*args, generator=None, device=None, **kwargs):
        device = torch.device(device or "cpu")
        asked.append(device.type)
        if generator is not None and generator.device.type != device.type:
            raise RuntimeError(f"Expected a '{device.type}' device type for generator")
        return real(*args, **kwargs)  # the numbers themselves: drawn on the CPU here

    monkeypatch.setattr(corpus.torch, "randint", randint)
    ids = torch.arange(100)
    x, y = random_windows(ids, block_size=8, batch_size=3, generator=_GeneratorOn("cuda"))
    assert asked == ["cuda"] and x.device == ids.device == y.device
    assert torch.equal(x[:, 1:], y[:, :-1])
    x, _ = next(window_batches(ids, 8, 3, _GeneratorOn("cuda")))
    assert asked == ["cuda", "cuda"] and x.shape == (3, 8)
    random_windows(ids, 8, 3)  # no generator: PyTorch's default one, on the CPU
    assert asked[-1] == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_windows_with_a_cuda_generator_on_cuda_and_on_cpu_data():
    for data_device in ("cuda", "cpu"):
        ids = torch.arange(100, device=data_device)
        x, y = random_windows(ids, 8, 3, torch.Generator(device="cuda").manual_seed(0))
        assert x.device.type == data_device and torch.equal(x[:, 1:], y[:, :-1])
