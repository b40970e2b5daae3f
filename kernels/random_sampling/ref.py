"""PyTorch reference for `random_sampling`: counter-based noise and exponential-race / Gumbel-max
sampling from probabilities or logits. The contract.

    k0, k1 = row_keys(seed, offset)                       # (B,) int64 holding uint32 keys
    bits  = noise_bits(seed, offset, vocab_size)          # (B, V) int64 holding uint32 values
    bits  = noise_bits_of(seed, offset, ids)              # (B, K) for chosen vocab ids
    e     = exponential_noise(seed, offset, vocab_size)   # (B, V) float32, Exp(1)
    token = random_sample_probs_ref(probs, seed, offset)
    token = random_sample_logits_ref(logits, seed, offset, temperature)

The noise (the library's definition; `sampler` and `fused_sample` reuse it). All arithmetic is on
uint32 values: int64 tensors masked with & 0xFFFFFFFF after every multiply and add, right shifts
logical on the masked value.
    mix32(x):  x ^= x >> 16; x *= 0x85EBCA6B; x ^= x >> 13; x *= 0xC2B2AE35; x ^= x >> 16
Per request, from its int64 seed s and int64 offset o (two's complement; lo/hi = low/high 32 bits):
    k0 = mix32(s_lo ^ mix32(s_hi ^ 0x9E3779B9))
    k1 = mix32(o_lo ^ mix32(o_hi ^ k0 ^ 0x7F4A7C15))
Per vocab id v (0 <= v < V):
    bits(v) = mix32(mix32(v ^ k1) + k0)      a bijection of v for fixed keys: no two ids collide
    u(v)    = ((bits(v) >> 9) + 0.5) * 2**-23  float32, exact, strictly inside (0, 1)
    E(v)    = -log(u(v))                       float32 natural log: Exp(1) noise, in [5.9e-8, 16.64]
u keeps 23 bits, not 24: with 24, the top cell's centre (2**24 - 0.5) * 2**-24 = 1 - 2**-25 is no
float32 and rounded to 1.0, so 1 id in 2**24 got E = 0 and a key of +inf (w > 0) or NaN (w = 0).
The noise of a row depends on (seed, offset, v) only: never on the batch, other rows or V.

Sampling (B rows, one token each; ties go to the lowest vocab id):
    probs   (B, V) float32, rows need not be normalised. Entries that are not > 0 (zero, negative,
            NaN) are excluded. token = argmax over the rest of p / E (float32 division); +inf
            probabilities take part (their key is +inf). A row with no entry > 0 gives -1.
    logits  (B, V) float32 or bfloat16 (widened exactly to float32); NaN counts as -inf and -inf
            entries are excluded. Per row, with t = temperature[b] (float32):
              0 < t < inf: token = argmax of l / t - log(E) (Gumbel-max with the same noise;
                           float32 division, then subtraction of the float32 log);
              otherwise    (t <= 0, NaN or +inf): greedy, token = argmax of l.
            +inf logits take part and win (their key is +inf, ties to the lowest id). A row with no
            logit > -inf gives -1.
    Keys of included entries are never NaN, so "argmax, ties lowest id" is a total order and every
    backend that computes the same float32 keys returns the same token, whatever order it reduces
    in. The float32 log is the accurate one (CUDA logf, torch.log): backends must not use a fast
    approximation.
Output: (B,) int64 token ids in [-1, V).

Pure torch on the tensors' device, no host synchronisation and no data-dependent shapes: CPU and
CUDA tensors alike, CUDA-graph capturable and traceable by torch.compile.
"""

from __future__ import annotations

import torch

__all__ = [
    "CHUNK",
    "DTYPES",
    "SOURCES",
    "VECTOR_BYTES",
    "check_config",
    "check_vector",
    "exponential_noise",
    "mix32",
    "noise_bits",
    "noise_bits_of",
    "random_sample_logits_ref",
    "random_sample_probs_ref",
    "random_sampling_shipped_configs",
    "row_keys",
    "uniform_noise",
    "vector_elements",
]

MASK32 = 0xFFFFFFFF
SEED_SALT = 0x9E3779B9
OFFSET_SALT = 0x7F4A7C15
MIX_MUL1 = 0x85EBCA6B
MIX_MUL2 = 0xC2B2AE35
# u = ((bits >> 9) + 0.5) * 2**-23: the top 23 bits, centred in their cell (exact in float32: the
# largest, 1 - 2**-24, is a float32; 24 bits would round the top cell's centre to 1.0).
U_SHIFT = 9
U_SCALE = 2.0**-23


def mix32(x: torch.Tensor) -> torch.Tensor:
    """The murmur3 finaliser on uint32 values held in an int64 tensor (entries in [0, 2**32))."""
    x = x ^ (x >> 16)
    x = (x * MIX_MUL1) & MASK32
    x = x ^ (x >> 13)
    x = (x * MIX_MUL2) & MASK32
    return x ^ (x >> 16)


def _halves(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) 32 bits of an int64 tensor's two's complement, each in [0, 2**32)."""
    t = t.to(torch.int64)
    return t & MASK32, (t >> 32) & MASK32


def row_keys(seed: torch.Tensor, offset: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(k0, k1): (B,) int64 tensors of uint32 keys of each request's (seed, offset), both (B,) int64."""
    s_lo, s_hi = _halves(seed)
    o_lo, o_hi = _halves(offset)
    k0 = mix32(s_lo ^ mix32(s_hi ^ SEED_SALT))
    k1 = mix32(o_lo ^ mix32(o_hi ^ k0 ^ OFFSET_SALT))
    return k0, k1


def noise_bits_of(seed: torch.Tensor, offset: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """(B, K) int64: the uint32 noise bits of the vocab ids `ids` ((K,) integers in [0, 2**32))
    of every request."""
    k0, k1 = row_keys(seed, offset)
    v = ids.to(torch.int64)
    return mix32((mix32(v[None, :] ^ k1[:, None]) + k0[:, None]) & MASK32)


def noise_bits(seed: torch.Tensor, offset: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(B, vocab_size) int64: the uint32 noise bits of every (request, vocab id)."""
    return noise_bits_of(seed, offset, torch.arange(vocab_size, dtype=torch.int64, device=seed.device))


def uniform_noise(bits: torch.Tensor) -> torch.Tensor:
    """float32 u = ((bits >> 9) + 0.5) * 2**-23 in (0, 1), exactly, from noise bits."""
    return ((bits >> U_SHIFT).to(torch.float32) + 0.5) * U_SCALE


def exponential_noise(seed: torch.Tensor, offset: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(B, vocab_size) float32 E = -log(u): Exp(1) noise of every (request, vocab id)."""
    return -torch.log(uniform_noise(noise_bits(seed, offset, vocab_size)))


def _first_argmax(keys: torch.Tensor, included: torch.Tensor) -> torch.Tensor:
    """(B,) int64: per row the lowest id among the included entries with the largest key, or -1."""
    best = torch.where(included, keys, float("-inf")).amax(dim=-1, keepdim=True)
    winners = included & (keys == best)
    # argmax of a 0/1 tensor returns the first maximal index: the lowest winning id.
    first = winners.to(torch.uint8).argmax(dim=-1)
    return torch.where(winners.any(dim=-1), first, -1)


def random_sample_probs_ref(probs: torch.Tensor, seed: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """(B,) int64 tokens: argmax of p / E over p > 0, ties lowest id; -1 for a row without p > 0.

    probs (B, V) float32; seed, offset (B,) int64 on probs' device.
    """
    p = probs.to(torch.float32)
    keys = p / exponential_noise(seed, offset, probs.shape[-1])
    return _first_argmax(keys, p > 0)


def random_sample_logits_ref(
    logits: torch.Tensor, seed: torch.Tensor, offset: torch.Tensor, temperature: torch.Tensor | None = None
) -> torch.Tensor:
    """(B,) int64 tokens: Gumbel-max of l / t where 0 < t < inf, greedy argmax of l elsewhere; ties
    lowest id; NaN counts as -inf; -1 for a row without a logit > -inf.

    logits (B, V) float32 or bfloat16; seed, offset (B,) int64; temperature (B,) float32 or None
    (t = 1 for every row), all on logits' device.
    """
    l = logits.to(torch.float32)
    l = torch.where(torch.isnan(l), float("-inf"), l)
    if temperature is None:
        temperature = torch.ones(l.shape[0], dtype=torch.float32, device=l.device)
    t = temperature.to(torch.float32)[:, None]
    scaled = (t > 0) & (t < float("inf"))
    gumbel = l / t - torch.log(exponential_noise(seed, offset, l.shape[-1]))
    keys = torch.where(scaled, gumbel, l)
    return _first_argmax(keys, l > float("-inf"))


# ----------------------------------------------------------------------------------------------------
# Static arguments of the backend factories (cuda.py and asc.py share them).

SOURCES = ("probs", "logits")
DTYPES = {"probs": ("float32",), "logits": ("float32", "bfloat16")}
_ELEMENT_BYTES = {"float32": 4, "bfloat16": 2}
# The widest global access of one instruction.
VECTOR_BYTES = 16
# Entries of a row one CUDA block samples from (a multiple of every vector width): the interface
# sizes the kernel's workspace with it, a record per chunk.
CHUNK = 4096


def check_config(name: str, source: str, dtype: str, vec: int) -> int:
    """ValueError/TypeError unless source is one of SOURCES, dtype one it takes and vec (elements
    per vector load) a power of two with vec * element size <= 16 bytes; returns the element size."""
    if source not in SOURCES:
        raise ValueError(f"{name}: source must be one of {', '.join(map(repr, SOURCES))}, got {source!r}")
    if dtype not in DTYPES[source]:
        raise ValueError(f"{name}: dtype {dtype!r} is not one of {', '.join(DTYPES[source])} for {source}")
    return check_vector(name, dtype, vec)


def check_vector(name: str, dtype: str, vec: int) -> int:
    """ValueError/TypeError unless vec (elements per vector load of a float32 or bfloat16 row) is a
    power of two with vec * element size <= 16 bytes; returns the element size. The sampling
    kernels that read rows like this one (sampler) check their loads with it too."""
    if isinstance(vec, bool) or not isinstance(vec, int):
        raise TypeError(f"{name}: vec must be an int, got {type(vec).__name__}")
    elem = _ELEMENT_BYTES[dtype]
    if vec < 1 or vec & (vec - 1) or vec * elem > VECTOR_BYTES:
        raise ValueError(f"{name}: vec must be a power of two with vec * {elem} <= {VECTOR_BYTES} bytes, got {vec}")
    return elem


def vector_elements(dtype: str, row_stride: int, base_align: int) -> int:
    """Elements per vector load: the widest power of two whose bytes divide the base alignment, the
    row stride in bytes and 16 (every row start is then aligned; V itself may be odd)."""
    elem = _ELEMENT_BYTES[dtype]
    vec_bytes = VECTOR_BYTES
    while vec_bytes > elem and (base_align % vec_bytes or (row_stride * elem) % vec_bytes):
        vec_bytes //= 2
    return vec_bytes // elem


def random_sampling_shipped_configs() -> list[tuple[str, str, int]]:
    """(source, dtype, vec): both sources, both logit dtypes, 16-byte vectors (aligned rows, the
    models' vocabularies) and element-wide loads (misaligned views). V, B and the row stride are
    dynamic."""
    return [
        ("probs", "float32", 4),
        ("probs", "float32", 1),
        ("logits", "float32", 4),
        ("logits", "float32", 1),
        ("logits", "bfloat16", 8),
        ("logits", "bfloat16", 1),
    ]
