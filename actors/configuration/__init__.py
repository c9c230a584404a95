"""What a node and a turn are configured with: the node's settings (``settings``), the
settings file ``actline.toml`` and its precedence (``settings_file``), runtime profiles
(``profiles``), the checks on what a turn request, followup, feedback or DONE may carry
(``checks``), the models a node serves (``models``) and a turn's own settings and limits,
resolved once from its ``config`` (``turn_settings``). Pure values and parsing, no I/O but
reading the settings file. May import ``actline.actors.errors`` and the packages below
``actline.actors`` (``timeline``, ``llm``, ``messages``), no other actors sub-package."""
