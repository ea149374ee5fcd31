"""The learning kit: what makes a tiny model worth training on the CPU runtime.

Locally built assets (:mod:`.assets`: tokenizer, random Llama, arithmetic parquets), verl's SFT
trainer as a child process (:mod:`.sft`), the warm starts (:mod:`.warmstart`, the shared base;
:mod:`.arithmetic_warmstart`, :mod:`.tool_warmstart`, :mod:`.code_warmstart`), in-process probes of
a checkpoint (:mod:`.tool_probe`, :mod:`.code_probe`), the demos ``longcat-plugins demo`` runs
(:mod:`.demos`) and the catalog of warm starts they and the tests start from (:mod:`.warm_catalog`). It builds on :mod:`longcat_plugins.runtime`; the runtime never imports it.
"""
