"""An OpenEnv environment package, written only against ``openenv-core`` (no rlxf imports), laid out as
``openenv init`` lays one out: typed models, an ``Environment`` on the server, ``create_app``.

A text game: reset(seed) names a digit; each step the policy's message is scored 1.0 if it starts with the
digit (``score``); the episode is done after two steps."""
