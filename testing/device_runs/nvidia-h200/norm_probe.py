"""What the fused add_rmsnorm probes beside it share (norm_fused_steps_ab.py, norm_occupancy_ab.py,
norm_write_order_ab.py): their bf16 input sets, each kernel's outputs on the first set, the calls
they time, and the bench's in-place peer. Imported from those scripts' directory."""
import torch

from kernels.norm.norm_bench import add_rms_norm_in_place
from testing import timer

EPS, DT = 1e-6, "bfloat16"


def fused_sets(t: int, D: int, dev: torch.device) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(x, residual, weight) sets of t bf16 rows of D, enough to rotate past 2 x L2."""
    n = timer.sets_for_rotation(4 * t * D * 2 + D * 2, timer.l2_cache_bytes(dev))
    tb = torch.bfloat16
    return [(torch.randn(t, D, device=dev, dtype=tb), torch.randn(t, D, device=dev, dtype=tb),
             (1 + 0.1 * torch.randn(D, device=dev)).to(tb)) for _ in range(n)]


def first_outputs(kernels, sets) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(residual, y) of each kernel(x, residual, weight, y) on a copy of the first set, y poisoned."""
    x, r, w = sets[0]
    outs = []
    for k in kernels:
        r_k, y_k = r.clone(), torch.full_like(x, float("nan"))
        k(x, r_k, w, y_k)
        outs.append((r_k, y_k))
    return outs


def kernel_calls(kernel, sets) -> list:
    """One call a set, y allocated per call as the bench does."""
    return [lambda s=s: kernel(s[0], s[1], s[2], torch.empty_like(s[0])) for s in sets]


def compiled_peer():
    """peer(x, residual, weight): torch.compile of the bench's in-place fused reference at EPS."""
    compiled = torch.compile(add_rms_norm_in_place, dynamic=False)
    return lambda x, r, w: compiled(x, r, w, EPS)
