"""Argument checks shared by the entry points over packed or cached tensors
(kvcache.py, varlen.py); `fail(kind, message)` builds the entry point's own
exception, named after it."""


def check_tensor(torch, fail, name, t, dims, device=None):
    """`t` is a `dims`-D CUDA tensor (on `device`, q's, when given)."""
    if not isinstance(t, torch.Tensor):
        raise fail(TypeError, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != dims:
        raise fail(ValueError, f"{name} must be {dims}-D, got shape {tuple(t.shape)}")
    if not t.is_cuda:
        raise fail(ValueError, f"{name} must be a CUDA tensor, got device {t.device}")
    if device is not None and t.device != device:
        raise fail(ValueError, f"{name} is on {t.device} but q is on {device}")
