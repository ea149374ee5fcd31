"""Embedded CPU runtime: verl platform ``cpu`` and the ``hf`` rollout (see DESIGN.md)."""
