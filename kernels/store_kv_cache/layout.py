"""Byte layouts of the quantised KV-cache records (the contract store_kv_cache writes and
load_paged_kv_cache reads), and their torch encoders/decoders.

A quantised cache holds one fixed-size record per token slot of the MLA latent row
(512 latent values + 64 rope values = 576). The cache tensor's dtype names the layout; its
last dimension is the record size in bytes (a float4_e2m1fn_x2 or float8_e4m3fn element is one
byte), and the kernels see it through `cache.view(torch.uint8)`:

FP4 record, 400 bytes (cache dtype torch.float4_e2m1fn_x2, shape (num_blocks, block_size, 400)):
    bytes [0, 256)     the 512 latent values as e2m1 codes, two per byte, element 2i in the low
                       nibble of byte i (kernels/quant/formats.py: encode_e2m1, pack_e2m1)
    bytes [256, 272)   16 UE8M0 scale bytes, one per 32 latent values: scale = 2 ** (byte - 127),
                       the next power of two >= max(amax, 6 * 2**-126) / 6 (quant's FP4 group-32)
    bytes [272, 400)   the 64 rope values as bf16, little-endian, copied bit for bit

FP8 record, 656 bytes (cache dtype torch.float8_e4m3fn, shape (num_blocks, block_size, 656);
DeepSeek-V3.2's layout):
    bytes [0, 512)     the 512 latent values as e4m3 (quant's per-group-128 FP8 with UE8M0 scales)
    bytes [512, 528)   4 fp32 scales, little-endian, one per 128 latent values: powers of two,
                       the next one >= max(amax, 448 * 2**-126) / 448
    bytes [528, 656)   the 64 rope values as bf16, copied bit for bit

Every section starts on a 16-byte boundary, so a kernel moves each with 128-bit accesses.
Dequantisation multiplies each decoded latent value by its group's scale in fp32 and rounds once
to bf16; rope values come back unchanged. NaN/Inf in the latent follow quant's rules (FP4 has no
NaN: NaN stores as +0; a group holding Inf gets scale Inf).
"""

from __future__ import annotations

import dataclasses

import torch

from kernels.quant import formats

__all__ = ["FP4", "FP8", "LATENT", "RECORDS", "ROPE", "WIDTH", "RecordLayout", "decode_records", "encode_rows", "record_layout"]

LATENT = 512
ROPE = 64
WIDTH = LATENT + ROPE


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """Where each section of one token's record lives (byte offsets)."""

    name: str
    cache_dtype: torch.dtype
    record_bytes: int
    latent_bytes: int  # the latent codes: bytes [0, latent_bytes)
    group: int  # latent values per scale
    scale_offset: int
    scale_bytes: int  # bytes of one scale (1: UE8M0 byte, 4: fp32)
    rope_offset: int

    @property
    def groups(self) -> int:
        return LATENT // self.group


FP4 = RecordLayout("fp4", torch.float4_e2m1fn_x2, 400, LATENT // 2, 32, 256, 1, 272)
FP8 = RecordLayout("fp8", torch.float8_e4m3fn, 656, LATENT, 128, 512, 4, 528)
RECORDS = {layout.cache_dtype: layout for layout in (FP4, FP8)}


def record_layout(cache_dtype: torch.dtype) -> RecordLayout | None:
    """The record layout a cache of this dtype holds, or None (a bf16 cache holds rows as they are)."""
    return RECORDS.get(cache_dtype)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """(N, k) tensor -> (N, k * itemsize) uint8 of its little-endian bytes."""
    return t.contiguous().view(torch.uint8)


def encode_rows(rows: torch.Tensor, layout: RecordLayout) -> torch.Tensor:
    """(N, 576) bf16 rows -> (N, record_bytes) uint8 records."""
    n = rows.shape[0]
    latent = rows[:, :LATENT].float().reshape(n, layout.groups, layout.group)
    amax = formats.group_amax(latent)
    out = torch.empty((n, layout.record_bytes), dtype=torch.uint8, device=rows.device)
    if layout is FP4:
        scale = formats.group_scale(amax, formats.E2M1_MAX, ue8m0=True)
        codes = formats.encode_e2m1(latent * torch.reciprocal(scale)[..., None]).reshape(n, LATENT)
        out[:, : layout.latent_bytes] = formats.pack_e2m1(codes)
        out[:, layout.scale_offset : layout.rope_offset] = formats.ue8m0_exponent(scale)
    else:
        scale = formats.group_scale(amax, formats.E4M3_MAX, ue8m0=True)
        q = formats.encode_e4m3(latent * torch.reciprocal(scale)[..., None]).reshape(n, LATENT)
        out[:, : layout.latent_bytes] = q.view(torch.uint8)
        out[:, layout.scale_offset : layout.rope_offset] = _bytes(scale)
    out[:, layout.rope_offset :] = _bytes(rows[:, LATENT:].to(torch.bfloat16))
    return out


def decode_records(records: torch.Tensor, layout: RecordLayout) -> torch.Tensor:
    """(N, record_bytes) uint8 records -> (N, 576) bf16 rows (dequantised latent, rope as stored)."""
    n = records.shape[0]
    sections = records[:, : layout.latent_bytes].contiguous()
    scale_bytes = records[:, layout.scale_offset : layout.rope_offset].contiguous()
    if layout is FP4:
        values = formats.decode_e2m1(formats.unpack_e2m1(sections))
        scale = formats.ue8m0_from_exponent(scale_bytes)
    else:
        values = sections.view(torch.float8_e4m3fn).float()
        scale = scale_bytes.view(torch.float32)
    latent = values.reshape(n, layout.groups, layout.group) * scale[..., None]
    rope = records[:, layout.rope_offset :].contiguous().view(torch.bfloat16)
    return torch.cat((latent.reshape(n, LATENT).to(torch.bfloat16), rope), dim=1)
