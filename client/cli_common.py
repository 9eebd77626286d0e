"""What the CLI's command modules share."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad command-line input, refused before anything is sent or read (exit 2)."""


class InterruptFlag:
    """Ctrl-C as a flag instead of KeyboardInterrupt, while in a ``with`` block: a loop
    that checks ``interrupted`` between steps stops after a whole step, so what it
    counted is exactly what it did. Leaves SIGINT alone where it is ignored (a
    background job) and restores the previous handler on exit."""

    def __init__(self):
        self.interrupted = False
        self._previous = None

    def _handle(self, _signum, _frame) -> None:
        self.interrupted = True

    def __enter__(self) -> InterruptFlag:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread() and (
                signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def admin_for(args):
    """The Admin client of a CLI command: its ``--bootstrap-server`` and the security
    settings of its ``--command-config`` (or the default client.properties)."""
    from .admin import Admin
    from .security import security_kwargs

    return Admin(args.bootstrap_server, **security_kwargs(args))
