"""How a plugin author tests a plugin with longcat-plugins' pytest fixtures."""

import longcat_example_plugin
import torch


def test_registered_in_verl(longcat_host):
    longcat_host(longcat_example_plugin, activate=True)
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    assert get_policy_loss_fn("truncated_reinforce") is longcat_example_plugin.compute_truncated_reinforce


def test_truncation_stops_gradient():
    old = torch.zeros(1, 2, dtype=torch.float64)
    new = torch.tensor([[0.0, 2.0]], dtype=torch.float64, requires_grad=True)  # ratios 1 and e^2 > 2
    adv = torch.ones(1, 2, dtype=torch.float64)
    mask = torch.ones(1, 2)
    loss, metrics = longcat_example_plugin.compute_truncated_reinforce(old, new, adv, mask, "token-mean", None)
    loss.backward()
    assert metrics["example/truncated_fraction"] == 0.5
    assert new.grad[0, 1] == 0 and new.grad[0, 0] < 0
