"""Evaluation (SPEC V1): the unbiased pass@k / pass^k / avg@k estimators and where they plug into verl.

* :mod:`.passk`: the estimators, plain functions of (n, c, k); no torch, no verl.

A home of its own rather than ``algorithms/``: that family is what verl *trains with* (losses,
advantages, registered into verl's registries); these estimators only *measure* a policy, in
validation metrics, in ``longcat-plugins eval`` and in the benches.
"""
