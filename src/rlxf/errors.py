"""The root of the errors rlxf raises on purpose (a leaf: any layer may raise one).

An :class:`RlxfError` is a failure the user can act on (a bad recipe, a data row, a reward that raises,
a checkpoint that cannot be written): ``rlxf`` shows its message as one ``rlxf:`` line on stderr and exits
with its ``exit_code``, no traceback (``--debug`` or ``RLXF_DEBUG=1`` shows it). Each class also keeps the
builtin base it had before (``ValueError``, ``OSError``, ...), so callers that catch those still do.
Messages are one line; the traceback of a role that failed in another process travels as the cause."""


class RlxfError(Exception):
    """An error raised on purpose, with a message that names the culprit and what to do."""

    exit_code = 1  # the run failed; its last checkpoint is kept (2: a usage mistake, refused at start-up)


class MissingPackageError(RlxfError, ImportError):
    """An optional package that a setting needs is not installed (vllm, reasoning-gym, wandb, ...); the message
    names the setting and what to install. An ImportError still, for callers that catch one."""

    exit_code = 2  # nothing ran that the package was needed for


class RemoteTraceback(Exception):
    """The formatted traceback of an error raised in another process, chained as the re-raised error's cause."""

    def __str__(self) -> str:
        return f"\n{self.args[0]}" if self.args else ""
