"""TileLang (CUDA) transcription of kernels/quant/formats.py: the same operations in the same order,
so kernels that use these expressions are bit-exact against the references. Every function builds
a TIR expression from fp32 expressions; none allocates or synchronises.
"""

# No `from __future__ import annotations`: callers build these inside T.prim_func bodies.
import tilelang.language as T

from kernels.quant.formats import E4M3_MAX, amax_floor, ue8m0_split

__all__ = [
    "abs_max",
    "e2m1_code",
    "e2m1_nibble_value",
    "e2m1_value",
    "e2m1_value_denormal",
    "e4m3",
    "e4m3_clamp",
    "group_scale",
    "scale_reciprocal",
    "ue8m0_exponent",
    "ue8m0_value",
]


def abs_max(acc, v):
    """max(acc, |v|) with NaN v ignored (fmaxf returns the non-NaN operand)."""
    return T.max(acc, T.abs(v))


def group_scale(amax, fmt_max: float, ue8m0: bool):
    """fp32 scale of a group from its NaN-free amax: max(amax, floor) / fmt_max, rounded up to a power
    of two when ue8m0. The UE8M0 scale comes from the exponent bits of max(amax, floor) with no
    division (formats.ue8m0_split says why that is the same power of two; checked against the
    division for every non-negative fp32 amax and +Inf, kernels/quant/PERF.md)."""
    a = T.max(amax, T.float32(amax_floor(fmt_max)))
    if not ue8m0:
        return a / T.float32(fmt_max)
    p, m = ue8m0_split(fmt_max)
    bits = T.reinterpret(a, "uint32")
    exponent = bits >> T.uint32(23)
    rounded = exponent - T.uint32(p) + T.if_then_else((bits & T.uint32(0x7FFFFF)) > T.uint32(m), T.uint32(1), T.uint32(0))
    return T.reinterpret(T.shift_left(T.if_then_else(exponent == T.uint32(255), T.uint32(255), rounded), T.uint32(23)), "float32")


def scale_reciprocal(scale, ue8m0: bool):
    """1 / scale, the IEEE quotient. A UE8M0 scale 2**(e - 127) (e in 1..253, or Inf) has the exact
    reciprocal 2**(127 - e), whose bits are 0x7F000000 less the scale's; for Inf that difference
    wraps to -Inf's bits, which fmaxf with 0 turns into Inf's reciprocal, 0."""
    if not ue8m0:
        return T.float32(1) / scale
    return T.max(T.reinterpret(T.uint32(0x7F000000) - T.reinterpret(scale, "uint32"), "float32"), T.float32(0))


def ue8m0_exponent(scale):
    """uint8 biased exponent of a power-of-two fp32 scale."""
    return T.cast((T.reinterpret(scale, "uint32") >> T.uint32(23)) & T.uint32(0xFF), "uint8")


def e4m3_clamp(v):
    """v clamped to [-448, 448] with NaN kept (fminf/fmaxf alone would turn NaN into a bound); cast the
    result to float8_e4m3 to finish formats.encode_e4m3."""
    return T.if_then_else(T.isnan(v), v, T.min(T.max(v, T.float32(-E4M3_MAX)), T.float32(E4M3_MAX)))


def e4m3(v):
    """float8_e4m3 of an fp32 value on CUDA: formats.encode_e4m3 in one conversion. sm_89 and newer
    convert with cvt.rn.satfinite (CUTLASS's float_e4m3_t, which TileLang's cast uses), which rounds
    to nearest-even, turns finite overflow and +-Inf into +-448 and keeps NaN: e4m3_clamp's work,
    so CUDA kernels skip it (backends whose conversion does not saturate keep e4m3_clamp)."""
    return T.cast(v, "float8_e4m3")


def e2m1_code(v):
    """uint8 e2m1 code (0..15, bit 3 the sign) of an fp32 value: formats.encode_e2m1, bit for bit.

    Instead of seven comparisons per value, one fp32 addition rounds: adding C = 2**(22 + e) to a
    magnitude in binade e (0 below 2, 1 below 4, 2 below 8, 3 above) leaves the sum in C's binade,
    whose spacing 2**(e - 1) (0.5 below 2) is the e2m1 grid's there, so the sum's low bits count grid
    steps, rounded to nearest with ties to even, which is the even code. C comes from the
    magnitude's exponent bits clamped between those of 1 and 8; the code is the sum's bits less
    C's, plus the codes below the binade (2e); larger magnitudes and Inf saturate to 7 (6.0). fmaxf
    maps NaN to 0 and keeps the product from contracting with the addition into a fused multiply-add.
    """
    a = T.max(T.abs(v), T.float32(0))
    exponent = T.reinterpret(a, "uint32") & T.uint32(0x7F800000)
    # Unsigned: Inf's exponent plus 22 does not wrap. min(e + k, ...) then max: one fused add-and-min.
    c = T.max(T.min(exponent + T.uint32(22 << 23), T.uint32(0x4C000000)), T.uint32(0x4A800000))
    below = T.shift_left(T.shift_right(c, T.uint32(23)) - T.uint32(149), T.uint32(1))
    code = T.min(T.reinterpret(a + T.reinterpret(c, "float32"), "uint32") - c + below, T.uint32(7))
    return T.cast(code, "uint8") | T.if_then_else(v < T.float32(0), T.uint8(8), T.uint8(0))


def ue8m0_value(byte):
    """fp32 power of two 2 ** (byte - 127) of a uint8 exponent (formats.ue8m0_from_exponent)."""
    return T.reinterpret(T.shift_left(T.cast(byte, "uint32"), T.uint32(23)), "float32")


def e2m1_value_denormal(code):
    """fp32 value of an e2m1 code 0..15, the same as e2m1_value, in four integer instructions and a
    multiply, for backends that keep fp32 denormals (CUDA without fast-math; others use e2m1_value).

    e2m1 is a float with one mantissa bit whose smallest normal is 1. Its magnitude bits placed at
    the low end of the fp32 exponent field and the top of the mantissa (`(m << 22)`) form an fp32
    of the same value times 2**-126: exponents 1..3 give the normal codes, exponent 0 the denormal
    2**-127 for code 1 (0.5) and zero for code 0. Multiplying by 2**126 is exact, as is every later
    product with a scale (two significant bits), so results match e2m1_value's bit for bit.
    """
    return e2m1_nibble_value(T.cast(code, "uint32"), 0)


def e2m1_nibble_value(word, q):
    """e2m1_value_denormal of the code in bits [4q, 4q + 4) of the uint32 `word` (q may be a loop
    variable of an unrolled loop: the shifts then fold into two instructions and a mask)."""
    c = word if isinstance(q, int) and q == 0 else T.shift_right(word, T.cast(4 * q, "uint32"))
    bits = T.shift_left(c & T.uint32(7), T.uint32(22)) | T.shift_left(c & T.uint32(8), T.uint32(28))
    return T.reinterpret(bits, "float32") * T.float32(2.0**126)


def e2m1_value(code):
    """fp32 value of an e2m1 code 0..15 (formats.decode_e2m1), built from its bits: magnitude codes
    2..7 are the normal numbers 2 ** ((m >> 1) - 1) * (1 + (m & 1) / 2), code 1 is 0.5, code 0 zero."""
    c = T.cast(code, "uint32")
    m = c & T.uint32(7)
    normal = T.shift_left((m >> T.uint32(1)) + T.uint32(126), T.uint32(23)) | T.shift_left(m & T.uint32(1), T.uint32(22))
    magnitude = T.if_then_else(m >= T.uint32(2), normal, T.if_then_else(m == T.uint32(1), T.uint32(126 << 23), T.uint32(0)))
    return T.reinterpret(magnitude | T.shift_left(c >> T.uint32(3), T.uint32(31)), "float32")
