"""The error of a recipe or override the config tree does not accept (a leaf: any layer may raise it)."""

from rlxf.errors import RlxfError


class ConfigError(RlxfError, ValueError):
    """A recipe or override the config tree does not accept; the message names the key."""

    exit_code = 2  # refused at start-up: nothing ran
