"""course_lib.inspection: hooks read without changing, ablation of nothing changes nothing,
attribution sums to the logits, and the detectors find a hand-built induction circuit."""

from __future__ import annotations

import pytest
import torch

from course_lib.gpt import GPT, GPTConfig
from course_lib.inspection import (
    ablate_head,
    ablate_heads,
    ablation_effects,
    attention_patterns,
    attribution_labels,
    direct_logit_attribution,
    head_inputs,
    head_means,
    in_context_score,
    induction_circuit,
    induction_scores,
    logit_lens,
    patch_head,
    previous_token_scores,
    repeated_tokens,
    residual_stream,
)
from course_lib.widgets import ModelExplorer


def _model(bias=False, positions="learned", seed=0):
    torch.manual_seed(seed)
    model = GPT(
        GPTConfig(
            vocab_size=11,
            block_size=16,
            d_model=24,
            num_heads=3,
            num_layers=2,
            bias=bias,
            positions=positions,
        )
    )
    with torch.no_grad():  # larger weights than GPT-2's init, so every part matters
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def _ids(seed=1, batch=3, seq=10, vocab=11):
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _no_hooks(model):
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_reading_with_hooks_leaves_outputs_unchanged_and_no_hook_behind(positions):
    model, ids = _model(positions=positions), _ids()
    with torch.no_grad():
        before = model(ids)
    patterns = attention_patterns(model, ids)
    stream = residual_stream(model, ids)
    head_inputs(model, ids)
    with torch.no_grad():
        after = model(ids)
    assert torch.equal(before, after) and _no_hooks(model)
    assert patterns.shape == (2, 3, 3, 10, 10)
    assert torch.allclose(patterns.sum(-1), torch.ones(2, 3, 3, 10), atol=1e-5)
    assert (patterns.triu(1) == 0).all()  # causal
    assert stream.shape == (3, 3, 10, 24)
    assert torch.allclose(logit_lens(model, ids)[-1], before, atol=1e-5)


def test_patterns_equal_the_layers_own_recorded_attention():
    from course_lib.blocks import record_attention

    model, ids = _model(), _ids()
    record_attention(model)
    with torch.no_grad():
        model(ids)
    recorded = torch.stack([layer.attention for layer in model.layers])
    record_attention(model, enabled=False)
    assert torch.allclose(attention_patterns(model, ids), recorded, atol=1e-6)


def test_ablating_nothing_changes_nothing_and_ablation_is_undone():
    model, ids = _model(), _ids()
    with torch.no_grad():
        before = model(ids)
        with ablate_heads(model, []):
            assert torch.equal(model(ids), before)
        with ablate_heads(model, [(1, 2)]):
            changed = model(ids)
        assert not torch.allclose(changed, before)
        assert torch.equal(model(ids), before) and _no_hooks(model)
    delta = ablate_head(model, ids, 1, 2)
    effects = ablation_effects(model, ids)
    assert effects[1, 2].item() == pytest.approx(delta, abs=1e-6)
    with torch.no_grad():
        assert torch.equal(model(ids), before)


def test_zero_ablation_equals_zeroing_the_heads_columns_of_the_output_projection():
    model, ids = _model(), _ids()
    with torch.no_grad(), ablate_heads(model, [(0, 1)]):
        hooked = model(ids)
    with torch.no_grad():
        model.layers[0].self_attn.out_proj.weight[:, 8:16] = 0.0
        assert torch.allclose(model(ids), hooked, atol=1e-6)


def test_mean_ablation_with_the_inputs_own_constant_mean_changes_nothing():
    model = _model()
    ids = torch.full((2, 1), 3)  # one position: every head's output is one vector, its own mean
    with torch.no_grad():
        before = model(ids)
        with ablate_heads(model, [(0, 0), (1, 2)], kind="mean", means=head_means(model, ids)):
            assert torch.allclose(model(ids), before, atol=1e-6)
    with pytest.raises(ValueError, match="means"):
        with ablate_heads(model, [(0, 0)], kind="mean"):
            pass
    with pytest.raises(ValueError, match="head must be"):
        with ablate_heads(model, [(0, 3)]):
            pass


@pytest.mark.parametrize("bias", [False, True])
def test_attribution_sums_to_the_logits(bias):
    model, ids = _model(bias=bias), _ids()
    parts = direct_logit_attribution(model, ids)
    assert parts.shape == (len(attribution_labels(model)), 3, 10, 11)
    with torch.no_grad():
        logits = model(ids)
    assert (parts.sum(0) - logits).abs().max() < 1e-4
    # without fixing the final norm's scale, the parts do not add up
    stream = residual_stream(model, ids)[-1]
    assert not torch.allclose(model.lm_head(stream), logits, atol=1e-2)


def test_patching_a_head_from_the_same_input_changes_nothing_and_from_another_does():
    model, clean, corrupted = _model(), _ids(1), _ids(2)
    with torch.no_grad():
        assert torch.allclose(patch_head(model, clean, clean, 1, 0), model(clean), atol=1e-6)
        patched = patch_head(model, clean, corrupted, 1, 0)
        assert not torch.allclose(patched, model(corrupted), atol=1e-3)
    assert _no_hooks(model)


@pytest.mark.parametrize("prev, induction, seed", [((0, 2), (1, 3), 0), ((0, 0), (2, 1), 5)])
def test_detectors_find_a_hand_built_induction_circuit(prev, induction, seed):
    model = induction_circuit(
        24, 24, previous_token_head=prev, induction_head=induction, num_layers=3, seed=seed
    )
    ids = repeated_tokens(8, 12, 24, torch.Generator().manual_seed(seed))
    scores = induction_scores(model, ids)
    previous = previous_token_scores(model, ids)
    assert (scores == scores.max()).nonzero().tolist() == [list(induction)]
    assert scores.max() > 0.9 and scores.flatten().sort().values[-2] < 0.2
    assert (previous == previous.max()).nonzero().tolist() == [list(prev)]
    assert previous.max() > 0.9
    assert in_context_score(model, ids) > 2.0
    effects = ablation_effects(model, ids)
    assert effects[induction].item() > 1.0 and effects[prev].item() > 1.0


def test_bad_inputs_are_refused_with_clear_messages():
    model = _model()
    with pytest.raises(ValueError, match="repeated twice"):
        induction_scores(model, _ids(seq=10))
    with pytest.raises(ValueError, match="block_size"):
        attention_patterns(model, _ids(seq=20))
    with pytest.raises(TypeError, match="course_lib GPT"):
        attention_patterns(torch.nn.Linear(2, 2), _ids())
    with pytest.raises(ValueError, match="layer must be"):
        ablate_head(model, _ids(), 2, 0)
    with pytest.raises(ValueError, match="earlier layer"):
        induction_circuit(previous_token_head=(1, 0), induction_head=(1, 1))


def test_the_explorer_shows_a_head_and_ablates_it_with_a_click():
    model = induction_circuit(24, 24, (0, 2), (1, 3))
    vocabulary = "abcdefghijklmnopqrstuvwx"
    explorer = ModelExplorer(model, vocabulary, "abcdefabcdef", layer=0, head=2)
    assert explorer.pattern()[5, 4] > 0.9  # the previous-token head
    assert explorer.loss == explorer.clean_loss
    explorer.toggle(1, 3)
    assert explorer.ablated == {(1, 3)} and explorer.loss > explorer.clean_loss + 0.5
    assert "L1H3" in repr(explorer)
    explorer.toggle(1, 3)
    assert explorer.loss == explorer.clean_loss and _no_hooks(model)
    with pytest.raises(ValueError, match="does not know"):
        explorer.set_text("ABC")
