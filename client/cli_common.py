"""What the CLI's command modules share."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad command-line input, refused before anything is sent or read (exit 2)."""


class InterruptFlag:
    """Ctrl-C (and SIGTERM: ``kill``, ``timeout``, a service manager) as a flag instead
    of KeyboardInterrupt or death, while in a ``with`` block: a loop that checks
    ``interrupted`` between steps stops after a whole step, so what it counted is
    exactly what it did, and a consumer leaves its group instead of lingering in it until
    its session times out. ``signum`` says which signal came. Leaves a signal alone
    where it is ignored or handled already (a background job) and restores the previous
    handlers on exit."""

    def __init__(self):
        self.interrupted = False
        self.signum: int | None = None
        self._previous: dict = {}

    def _handle(self, signum, _frame) -> None:
        self.interrupted = True
        self.signum = signum

    def __enter__(self) -> InterruptFlag:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig, default in ((signal.SIGINT, signal.default_int_handler),
                                 (signal.SIGTERM, signal.SIG_DFL)):
                if signal.getsignal(sig) is default:
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    @property
    def exit_code(self) -> int:
        """The shell's code for the signal that came (130 for Ctrl-C, 143 for SIGTERM)."""
        return 128 + (self.signum or 2)


def admin_for(args):
    """The Admin client of a CLI command: its ``--bootstrap-server`` and the security
    settings of its ``--command-config`` (or the default client.properties)."""
    from .admin import Admin
    from .security import security_kwargs

    return Admin(args.bootstrap_server, **security_kwargs(args))
