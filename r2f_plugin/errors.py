"""The one exception type a user sees: a single line naming the problem and the fix."""


class UserError(Exception):
    """Bad input or environment. The CLI prints ``error: <message>`` and exits 2.

    Messages are one line and say what is wrong and what to do about it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


def described(exc: BaseException, limit: int = 200) -> str:
    """``Type: first line`` of a library's exception, short enough for a one-line error."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit]}" if text else type(exc).__name__


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (``timeout``, SLURM, ``docker stop``): the run unwinds as on Ctrl-C,
    keeping and exporting what is done and removing its scratch and locks; exit 143."""
