"""TileLang (CUDA) transcription of kernels/quant/formats.py: the same operations in the same order,
so kernels that use these expressions are bit-exact against the references. Every function builds
a TIR expression from fp32 expressions (mx_fp4_scales, a macro, assigns three of them to the
caller's registers); none allocates or synchronises.
"""

# No `from __future__ import annotations`: callers build these inside T.prim_func bodies.
import tilelang.language as T

from kernels.quant.formats import E2M1_MAX, E4M3_MAX, amax_floor, ue8m0_split

_FLT_MAX = 3.4028234663852886e38
# fp32 bits of 2**-106, the rounding constant of e2m1_code_denormal.
_E2M1_DENORMAL_BIAS = (127 - 106) << 23
# e2m1_code_biased's offset (2 * 149, C's biased exponent doubled), once per nibble of a word.
_E2M1_CODE_BIAS = 298
_E2M1_WORD_BIAS = (_E2M1_CODE_BIAS * 0x11111111) & 0xFFFFFFFF

# The CUDA source the kernels that use reciprocal_rn or pairs_abs_max put in their prelude.
# tl_ops_max_bf16x2: the larger of each half of two bfloat16 pairs (NaN ignored); the abs variant
# clears the second pair's signs first.
CUDA_PRELUDE = """
__device__ __forceinline__ float tl_ops_rcp_approx(float s) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
  return r;
}
__device__ __forceinline__ unsigned tl_ops_max_bf16x2(unsigned a, unsigned b) {
  unsigned r;
  asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ unsigned tl_ops_abs_max_bf16x2(unsigned acc, unsigned w) {
  unsigned a;
  asm("abs.bf16x2 %0, %1;" : "=r"(a) : "r"(w));
  return tl_ops_max_bf16x2(acc, a);
}
"""

__all__ = [
    "CUDA_PRELUDE",
    "abs_max",
    "bf16_pair_value",
    "e2m1_code",
    "e2m1_code_biased",
    "e2m1_code_denormal",
    "e2m1_denormal_multiplier",
    "e2m1_nibble_value",
    "e2m1_pair_bits",
    "e2m1_sign_threshold",
    "e2m1_value",
    "e2m1_value_denormal",
    "e2m1_word",
    "e4m3",
    "e4m3_clamp",
    "fp32_quotient",
    "group_scale",
    "markstein_quotient",
    "mx_fp4_scales",
    "pairs_abs_max",
    "reciprocal_rn",
    "scale_reciprocal",
    "ue8m0_exponent",
    "ue8m0_value",
    "widen",
]


def abs_max(acc, v):
    """max(acc, |v|) with NaN v ignored (fmaxf returns the non-NaN operand)."""
    return T.max(acc, T.abs(v))


def pairs_abs_max(words):
    """fp32 max |x| over the bfloat16 pairs in the uint32 words, NaN ignored (the other operand
    wins), as abs_max over the widened elements: a max only selects, so it can run on the pairs
    themselves, one instruction a pair (max.bf16x2 of |pair|) and one widening at the end. CUDA
    only; the kernel's prelude needs CUDA_PRELUDE."""
    acc = T.uint32(0)
    for word in words:
        acc = T.call_extern("uint32", "tl_ops_abs_max_bf16x2", acc, word)
    return T.max(bf16_pair_value(acc, 0), bf16_pair_value(acc, 1))


def bf16_pair_value(word, hi):
    """fp32 of the low (hi 0) or high (hi 1) bfloat16 of a uint32 holding two, little-endian: one
    shift or one mask, where the cast of a lone bf16 extracts its half first. hi may be a TIR
    expression (an unrolled loop's index parity): the select folds away once the loop unrolls."""
    if isinstance(hi, int):
        bits = word & T.uint32(0xFFFF0000) if hi else T.shift_left(word, T.uint32(16))
    else:
        bits = T.if_then_else(hi == 1, word & T.uint32(0xFFFF0000), T.shift_left(word, T.uint32(16)))
    return T.reinterpret(bits, "float32")


def widen(raw, s, v):
    """fp32 of raw[s, v] for a (steps, n) local buffer, v an unrolled index: a bfloat16 pair (n
    even) widens from its 32-bit word (bf16_pair_value), any other element by its cast."""
    n = raw.shape[1]
    if raw.dtype == "bfloat16" and n % 2 == 0:
        return bf16_pair_value(T.view(raw, (raw.shape[0], n // 2), "uint32")[s, v // 2], v % 2)
    return T.cast(raw[s, v], "float32")


def fp32_quotient(a, c: float):
    """RN(a / c), the IEEE quotient, for a constant c and fp32 a in [c * 2**-126, FLT_MAX] or +Inf,
    in five instructions where nvcc's division takes twelve and a branch to its slow path (which
    also keeps ptxas from overlapping one group's scale with the next group's work). CUDA only.
    markstein_quotient with c's reciprocal folded in; checked for every fp32 a of the range for
    c = 448 and 6 (quant_test: the steps in float64 on the CPU, the kernel on the device)."""
    return markstein_quotient(a, T.float32(c), T.float32(1.0 / c))


def markstein_quotient(a, c, r):
    """RN(a / c) from r = RN(1 / c), for positive fp32 c and a whose quotient, remainder and their
    intermediates neither underflow nor overflow; +Inf a gives +Inf. CUDA only.

    q0 = RN(a * r) is within an ulp of a / c, the remainder a - q0 * c is exact in one fused
    multiply-add, and RN(q0 + remainder * r) is then the correctly rounded quotient (Markstein's
    correction). +Inf makes the remainder NaN, which fmaxf turns into -FLT_MAX, so the correction
    leaves q0 = Inf."""
    q0 = T.call_pure_extern("float32", "__fmul_rn", a, r)
    remainder = T.max(T.call_pure_extern("float32", "__fmaf_rn", -q0, c, a), T.float32(-_FLT_MAX))
    return T.call_pure_extern("float32", "__fmaf_rn", remainder, r, q0)


def reciprocal_rn(s):
    """RN(1 / s), the IEEE reciprocal, for fp32 s in [2**-126, 2**126) (positive, normal, with a
    normal reciprocal), and 0 for +Inf: rcp.rn's own fast path (one approximation, one Newton step)
    in four instructions, without its range check and slow-path branch (Inf's NaN is fmaxf'd to 0).
    That range holds every finite group_scale (at most FLT_MAX / 6 < 2**126). CUDA only; the
    kernel's prelude needs CUDA_PRELUDE. Checked for every fp32 of the range on the device
    (quant_test)."""
    r = T.call_extern("float32", "tl_ops_rcp_approx", s)
    error = T.call_pure_extern("float32", "__fmaf_rn", r, s, T.float32(-1))
    return T.max(T.call_pure_extern("float32", "__fmaf_rn", r, -error, r), T.float32(0))


def group_scale(amax, fmt_max: float, ue8m0: bool, quotient=None):
    """fp32 scale of a group from its NaN-free amax: max(amax, floor) / fmt_max, rounded up to a power
    of two when ue8m0. The UE8M0 scale comes from the exponent bits of max(amax, floor) with no
    division (formats.ue8m0_split says why that is the same power of two; checked against the
    division for every non-negative fp32 amax and +Inf, kernels/quant/PERF.md). `quotient` (a, c)
    -> RN(a / c) replaces the division (CUDA kernels pass fp32_quotient)."""
    a = T.max(amax, T.float32(amax_floor(fmt_max)))
    if not ue8m0:
        return a / T.float32(fmt_max) if quotient is None else quotient(a, fmt_max)
    p, m = ue8m0_split(fmt_max)
    bits = T.reinterpret(a, "uint32")
    exponent = bits >> T.uint32(23)
    rounded = exponent - T.uint32(p) + T.if_then_else((bits & T.uint32(0x7FFFFF)) > T.uint32(m), T.uint32(1), T.uint32(0))
    return T.reinterpret(T.shift_left(T.if_then_else(exponent == T.uint32(255), T.uint32(255), rounded), T.uint32(23)), "float32")


def scale_reciprocal(scale, ue8m0: bool, reciprocal=None):
    """1 / scale, the IEEE quotient, for a scale from group_scale. A UE8M0 scale 2**(e - 127) (e in
    1..253, or Inf) has the exact reciprocal 2**(127 - e), whose bits are 0x7F000000 less the
    scale's; for Inf that difference wraps to -Inf's bits, which fmaxf with 0 turns into Inf's
    reciprocal, 0. `reciprocal` s -> RN(1 / s) replaces an fp32 scale's division (CUDA kernels
    pass reciprocal_rn)."""
    if not ue8m0:
        return T.float32(1) / scale if reciprocal is None else reciprocal(scale)
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


def e2m1_denormal_multiplier(inv):
    """inv * 2**-126 for e2m1_code_denormal: exact for a UE8M0 reciprocal 2**k with k >= -23 (a
    denormal or normal power of two) and for inv 0; 0 for k < -23 (it underflows), where the caller
    multiplies by inv and then by 2**-126 instead."""
    return inv * T.float32(2.0**-126)


def e2m1_sign_threshold(scale):
    """below with x * inv < 0 exactly when x < below, for a UE8M0 scale 2**-k (inv = 2**k) or Inf:
    a product at most 2**-150 in magnitude rounds to a zero (2**-150 itself is a tie, to the even
    zero), so x * inv < 0 iff x < -2**(-150 - k). That is -(scale * 2**-150), in two multiplies
    (2**-150 is below fp32's range): exact for k <= -1, rounded to -0 for k >= 0 (then x < 0 is the
    test: every negative x keeps its sign), -Inf for an Inf scale (inv 0: no product is negative)."""
    return -((scale * T.float32(2.0**-100)) * T.float32(2.0**-50))


def e2m1_code_denormal(x, m, below):
    """uint32 e2m1 code (0..15, bit 3 the sign) of v = fp32(x * inv) for a UE8M0 reciprocal inv:
    formats.encode_e2m1(v) bit for bit, given that x is a bfloat16 or float16 value (8 or 11
    significant bits; not float32), m = e2m1_denormal_multiplier(inv) is nonzero or inv is 0, below
    = e2m1_sign_threshold(1 / inv), and |v| <= 6 (inv is the reciprocal of the UE8M0 scale of a
    group holding x: the scale is at least amax / 6) unless x is Inf or NaN. Where the multiplier
    underflows (inv < 2**-23), pass x * inv, 2**-126 and -0.0: the same code, one multiply more.
    The sum and the sign enter the code by addition, so callers that add codes into words (as
    code << 4i, wrapping) let the compiler fold every code's constant into one.

    w = x * m is v * 2**-126 in one rounding, and e2m1 is a float with one mantissa bit whose
    smallest normal is 1: w's fp32 bits are v's magnitude code followed by 22 more bits (below 1, w
    is an fp32 denormal and bits = |v| * 2**23, uniformly spaced; from 1 up the exponent field
    counts binades as e2m1's does: 1.0 -> 2 << 22, 6.0 -> 7 << 22). The product is exact when
    |v| >= 2**-13 (11 significant bits fit above 2**-149); smaller ones round monotonically to at
    most 2**-139, far below the first boundary 0.25 (float32 x would round here, onto the 0.75 and
    1.75 ties: it keeps e2m1_code). fmaxf(|w|, 0) maps NaN (Inf * 0 included) to 0.

    The code is bits / 2**22 rounded to nearest, ties to even (a grid midpoint 0.25, 0.75, ..., 5
    lies between codes that differ in bit 22). bits >> 2 is at most 7 << 20, an fp32 denormal whose
    value is linear in its bits; adding 2**-106, whose ulp is 2**20 denormal steps, rounds it to the
    nearest multiple with ties to even, and the sum's bits less 2**-106's are the code. The two bits
    dropped are zero unless |v| < 2**-11 (11 significant bits), whose code is 0 either way. The sign is v < 0, which is
    not w's (-0.0, and products that round to -0, carry no sign in the contract, and w rounds to -0
    far sooner than v): x < below says it exactly.
    """
    bits = T.reinterpret(T.max(T.abs(x * m), T.float32(0)), "uint32")
    # The sign bit rides on the addend: 2**-106 plus 8 of its ulps adds 8 to the sum's bits.
    bias = T.if_then_else(x < below, T.float32(2.0**-106 + 8 * 2.0**-129), T.float32(2.0**-106))
    return T.reinterpret(T.reinterpret(bits >> T.uint32(2), "float32") + bias, "uint32") - T.uint32(_E2M1_DENORMAL_BIAS)


def e2m1_code_biased(v):
    """uint32 magnitude code (0..7) of fp32 v plus 298, for e2m1_word: e2m1_code's rounding with
    the saturation and NaN folded into one clamp of |v| to [0, 6] (fmaxf, then fminf), so that C
    = 2**(22 + e) needs only its lower bound; |v| + C rounds |v| onto the grid (ties to even),
    whose bits less C's count grid steps, and C's bits >> 22 add 2 * (149 + e), the codes below
    the binade plus 298, which the caller subtracts once per word."""
    a = T.min(T.max(T.abs(v), T.float32(0)), T.float32(6))
    c = T.max((T.reinterpret(a, "uint32") & T.uint32(0x7F800000)) + T.uint32(22 << 23), T.uint32(0x4A800000))
    return T.reinterpret(a + T.reinterpret(c, "float32"), "uint32") - c + T.shift_right(c, T.uint32(22))


def e2m1_word(values):
    """uint32 of the e2m1 codes of 8 fp32 values, value i in nibble i (low nibble first,
    formats.pack_e2m1): formats.encode_e2m1 bit for bit, provided that a value's sign bit is set
    exactly when it is below 0, that is no value is -0.0 or a NaN with its sign bit set. The CUDA
    product __fmaf_rn(x, inv, +0.0) gives that for inv > 0 whenever x * inv does not round to
    zero from below: +-0.0 * inv + 0.0 is +0.0, and an fp32 operation with a NaN result returns the
    canonical NaN 0x7FFFFFFF (checked on the device, quant_test). CUDA only.

    Magnitudes add into the word (e2m1_code_biased, each shifted to its nibble; one constant for
    the whole word), and the sign bits shift in four at a time (a funnel shift per value: the sign
    and three exponent bits), masked once per word."""
    magnitude = e2m1_code_biased(values[0])
    for i, v in enumerate(values[1:], start=1):
        magnitude = magnitude + T.shift_left(e2m1_code_biased(v), T.uint32(4 * i))
    signs = T.uint32(0)
    for v in reversed(values):
        signs = T.call_pure_extern("uint32", "__funnelshift_l", T.reinterpret(v, "uint32"), signs, T.uint32(4))
    return (magnitude - T.uint32(_E2M1_WORD_BIAS)) | (signs & T.uint32(0x88888888))


@T.macro
def mx_fp4_scales(amax, byte, sc):
    """An MX FP4 group (UE8M0 scale) of NaN-free amax: byte[0] its scale byte, and sc[0] = inv (1 /
    the scale), sc[1] = e2m1_denormal_multiplier(inv), sc[2] = e2m1_sign_threshold(the scale): what
    e2m1_code_denormal takes. sc[1] is 0 where inv * 2**-126 underflows (a scale above 2**23) and
    inv is not 0: the caller multiplies by inv first then."""
    sc[2] = group_scale(amax, E2M1_MAX, True)
    byte[0] = ue8m0_exponent(sc[2])
    sc[0] = scale_reciprocal(sc[2], True)
    sc[2] = e2m1_sign_threshold(sc[2])
    sc[1] = e2m1_denormal_multiplier(sc[0])


def e2m1_pair_bits(lo, hi, q):
    """uint32 e2m1 codes lo (element 2q) and hi (element 2q + 1) in byte q % 4 of a word of 8 codes,
    low nibble first (formats.pack_e2m1), for the caller to add into word q // 4: the codes do not
    overlap, and addition lets e2m1_code_denormal's constants fold into one per word."""
    return T.shift_left(lo + T.shift_left(hi, T.uint32(4)), T.cast(8 * (q % 4), "uint32"))


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
