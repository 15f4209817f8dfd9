"""Which device a gpumem function means, by PyTorch's rule: none given is the current
device, and a device can be an int, 'cuda:1', 'cuda' or a torch.device."""
import sys

ALL = -1  # every device started so far (stats, memory_summary, snapshot, ...)


def current(torch=None):
    """torch.cuda.current_device() once torch is imported and CUDA initialized; else 0.
    Never initializes CUDA itself: that would open a context on device 0 in every process
    that merely asks (torchrun's launcher, CPU-only DataLoader workers)."""
    torch = torch if torch is not None else sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    is_initialized = getattr(cuda, "is_initialized", None)
    if is_initialized is None or not is_initialized():
        return 0
    return cuda.current_device()


def index(device=None, torch=None):
    """The device number `device` means: None, 'cuda' and torch.device('cuda') are the
    current device; an int (-1 for all devices where the function takes it) is itself."""
    if device is None:
        return current(torch)
    if isinstance(device, bool):
        raise TypeError(f"gpumem: not a device: {device!r}")
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        return _from_string(device, torch)
    kind, number = getattr(device, "type", None), getattr(device, "index", None)
    if kind is None:
        raise TypeError(f"gpumem: not a device: {device!r}")
    return _checked(kind, number, device, torch)


def _from_string(text, torch):
    kind, _, number = text.strip().partition(":")
    if kind.isdigit() and not number:
        return int(kind)
    if number and not number.isdigit():
        raise ValueError(f"gpumem: not a device: {text!r}")
    return _checked(kind, int(number) if number else None, text, torch)


def _checked(kind, number, device, torch):
    if kind != "cuda":
        raise ValueError(f"gpumem: not a CUDA device: {device!r}")
    return current(torch) if number is None else int(number)
