"""Files shipped with the package, read with ``importlib.resources``: the default bootstrap
peers (``bootstrap.txt``) and the task sets (``tasks.toml``, ``tasks-laptop.toml``).

May import: nothing (it holds no code).
"""
