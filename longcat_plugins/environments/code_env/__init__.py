"""The code-sandbox environment (E5, 2601 report §3.1.1): repository tasks with hidden tests, a
per-episode workspace with unified tools (search, read/write file, edit, shell, submit) on the
project's code sandbox, and a pool that provisions and recycles workspaces off the critical path.

- :mod:`.tasks` — the generator of small repository tasks (deterministic per seed) and their parquet.
- :mod:`.workspace` — the file tools over one workspace directory, confined to it.
- :mod:`.pool` — workspaces provisioned ahead of demand and reset to the pristine copy.
- :mod:`.episode` — one episode: the tools, the shell in the sandbox, the hidden-test reward.
- :mod:`._agent_loop` — ``longcat_code_agent``, the tool-agent loop over a code episode.
- :mod:`.golden` — golden trajectories in the loop's format (the code-agent warm start's SFT data).
"""
