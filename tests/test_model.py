import pytest
import torch

from nanlab.errors import NanlabError
from nanlab.model import GPT, GPTConfig


@pytest.mark.parametrize("changes", [
    {},
    {"norm_impl": "manual"},
    {"qk_norm": True},
    {"softmax": "naive"},
    {"pos_encoding": "sinusoidal"},
    {"activation": "relu"},
    {"activation": "sigmoid"},
    {"init": "xavier"},
    {"init": "kaiming"},
    {"use_norms": False, "n_layer": 4},
    {"n_features": 0},
])
def test_every_switch_builds_and_runs(changes):
    model = GPT(GPTConfig(**changes))
    tokens = torch.randint(0, 32, (2, 16))
    features = torch.randn(2, 16, 1)
    logits = model(tokens, features if model.feat_proj is not None else None)
    assert logits.shape == (2, 16, 32)
    assert torch.isfinite(logits).all()


def test_naive_and_stable_softmax_agree_on_small_scores():
    torch.manual_seed(0)
    stable, naive = GPT(GPTConfig()), GPT(GPTConfig(softmax="naive"))
    naive.load_state_dict(stable.state_dict())
    tokens = torch.randint(0, 32, (2, 8))
    torch.testing.assert_close(stable(tokens), naive(tokens))


def test_manual_and_torch_layernorm_agree_in_fp32():
    torch.manual_seed(0)
    a, b = GPT(GPTConfig()), GPT(GPTConfig(norm_impl="manual"))
    b.load_state_dict(a.state_dict())
    tokens = torch.randint(0, 32, (2, 8))
    torch.testing.assert_close(a(tokens), b(tokens), atol=1e-5, rtol=1e-4)


def test_init_scale_multiplies_weights():
    torch.manual_seed(0)
    big = GPT(GPTConfig(init_scale=10.0))
    assert 0.15 < big.lm_head.weight.std().item() < 0.25  # 10 x 0.02


def test_attention_is_causal():
    model = GPT(GPTConfig()).eval()
    tokens = torch.randint(0, 32, (1, 10))
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 32
    torch.testing.assert_close(model(tokens)[0, :-1], model(changed)[0, :-1])


@pytest.mark.parametrize("field, value, words", [
    ("n_layer", 0, ">= 1"),
    ("norm_impl", "fast", "choose one of"),
    ("softmax", "clever", "'stable', 'naive'"),
    ("norm_eps", -1.0, "from 0.0 to 1.0"),
    ("n_embd", 30, "multiple of n_head"),
    ("activation", "tanh", "'gelu'"),
])
def test_bad_config_names_field_value_and_allowed(field, value, words):
    with pytest.raises(NanlabError) as err:
        GPTConfig(**{field: value})
    message = str(err.value)
    assert field in message and repr(value) in message or str(value) in message
    assert words in message
