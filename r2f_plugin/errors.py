"""The one exception type a user sees: a single line naming the problem and the fix."""


class UserError(Exception):
    """Bad input or environment. The CLI prints ``error: <message>`` and exits 2.

    Messages are one line and say what is wrong and what to do about it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (``timeout``, SLURM, ``docker stop``): the run unwinds as on Ctrl-C,
    keeping and exporting what is done and removing its scratch and locks; exit 143."""
