"""The error of a recipe or override the config tree does not accept (a leaf: any layer may raise it)."""


class ConfigError(ValueError):
    """A recipe or override the config tree does not accept; the message names the key."""
