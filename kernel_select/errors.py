"""Exception hierarchy. Every error a user can trigger derives from KernelSelectError.

Messages name what was wrong and how to fix it; callers inside torch.compile catch
KernelSelectError (and only log), callers on the CLI print it as a one-line error.
"""

from __future__ import annotations


class KernelSelectError(Exception):
    """Base class for all kernel_select errors."""


class ProblemError(KernelSelectError, ValueError):
    """A GEMM problem (sizes, dtype, op) is invalid. Subclasses ValueError for familiarity."""


class ConfigError(KernelSelectError, ValueError):
    """A GEMM kernel config, or a text that should describe one, is invalid."""


class DeviceError(KernelSelectError, ValueError):
    """An unknown device name, or no device could be detected."""


class LUTError(KernelSelectError, ValueError):
    """A kernel lookup table could not be read, parsed or validated."""


class ModelError(KernelSelectError):
    """A performance model could not be loaded, or does not fit the request."""


class ModelCardMismatchError(ModelError):
    """A model file does not match the running code (feature version, device, ...)."""


class UnsupportedProblemError(ModelError, ValueError):
    """A performance model cannot score this problem (dtype, op or device)."""


class DatasetError(KernelSelectError, ValueError):
    """A benchmark dataset is missing columns, has the wrong schema, or is empty."""


class OptionError(KernelSelectError, ValueError):
    """A kernel_select option (a `kernel_select.knobs` knob, its environment variable, or a
    torch.compile option) has an invalid value."""


class NoTrainedModelError(ModelError):
    """No trained model serves the device (neither calibrated nor shipped, nor a same-architecture
    stand-in); the Inductor handler then leaves Inductor its own candidates."""


def first_line(error: BaseException | str) -> str:
    """The first line of an error's message (or of a text), for one-line reports; an exception
    without a message gives its type's name."""
    lines = str(error).strip().splitlines()
    if lines:
        return lines[0]
    return type(error).__name__ if isinstance(error, BaseException) else ""
