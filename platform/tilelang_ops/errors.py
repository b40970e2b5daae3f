"""Errors raised by the dispatcher."""


class KernelUnavailableError(LookupError):
    """A factory or interface function is not provided by the chosen backend.

    The message names the kernel, the backend asked for, and the backends that do provide it; the
    test plugin turns this error into a skip that carries the same message.
    """

    def __init__(self, name: str, kernel: str | None, backend: str, available_on: tuple[str, ...]):
        self.name = name
        self.kernel = kernel
        self.backend = backend
        self.available_on = available_on
        if kernel is None:
            msg = f"{name}: no registered kernel provides it (backend {backend!r})"
        else:
            where = ", ".join(available_on) if available_on else "no backend"
            msg = f"{name} (kernel {kernel!r}) is not available on backend {backend!r}; provided by: {where}"
        super().__init__(msg)


class KernelNameConflictError(ImportError):
    """Two kernel modules export the same public name; the message names both modules."""
