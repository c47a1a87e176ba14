"""Constants of the XNNPACK microkernels that the official delegate runs for sin, cos,
sigmoid and reciprocal square root on an x86-64 CPU with AVX-512F, shared by the numpy
tier (``backends/xnnpack/exact_math.py``) and the compiled tier (``jit/xnnpack_math.py``)
so that both round as the official delegate does, bit for bit (this module imports
nothing, numba least of all).

The values are facts of the arithmetic (measured against the official runtime over 2**20
inputs each, and, for ``vrsqrt14ps``, over every float32 mantissa), not code.
"""

# sin and cos: reduce x modulo 2 pi (2 pi split in two for the reduction), fold into
# [-pi/2, pi/2], then the odd/even rational x (1 + a3 x^2 + a5 x^4) / (1 + b2 x^2 + b4 x^4).
# cos(x) is that sine of (pi/2 - x), pi/2 rounded to float32 (one subtraction).
TRIG = {
    "inv_2pi": 0.15915494,
    "two_pi_hi": 6.28125,
    "two_pi_lo": 1.9353072e-3,
    "pi": 3.1415927,
    "half_pi": 1.5707964,
    "a3": -1.3314664364e-01,
    "a5": 3.2340581529e-03,
    "b2": 3.3519912511e-02,
    "b4": 4.8770775902e-04,
}

# sigmoid: e = 2**n on z = -|x| (n = z log2 e to 1/32 through a magic bias, 2**(n mod 1)
# from a 32-entry table, a degree-2 correction), f = e / (e + 1), 1 - f for x >= 0.
SIGMOID = {
    "magic_bias": float.fromhex("0x1.8p18"),
    "log2e": float.fromhex("0x1.715476p0"),
    "minus_ln2_hi": -float.fromhex("0x1.62E430p-1"),
    "minus_ln2_lo": float.fromhex("0x1.05C61p-29"),
    "c2": 0.5,
    "c1": float.fromhex("0x1.0000F6p-0"),
}
SIGMOID_TABLE = tuple(
    float.fromhex(h)
    for h in (
        "0x1.000000p+0", "0x1.059B0Ep+0", "0x1.0B5586p+0", "0x1.11301Ep+0",
        "0x1.172B84p+0", "0x1.1D4874p+0", "0x1.2387A6p+0", "0x1.29E9E0p+0",
        "0x1.306FE0p+0", "0x1.371A74p+0", "0x1.3DEA64p+0", "0x1.44E086p+0",
        "0x1.4BFDAEp+0", "0x1.5342B6p+0", "0x1.5AB07Ep+0", "0x1.6247ECp+0",
        "0x1.6A09E6p+0", "0x1.71F75Ep+0", "0x1.7A1148p+0", "0x1.82589Ap+0",
        "0x1.8ACE54p+0", "0x1.93737Cp+0", "0x1.9C4918p+0", "0x1.A5503Cp+0",
        "0x1.AE89FAp+0", "0x1.B7F770p+0", "0x1.C199BEp+0", "0x1.CB720Ep+0",
        "0x1.D5818Ep+0", "0x1.DFC974p+0", "0x1.EA4AFAp+0", "0x1.F50766p+0",
    )
)  # fmt: skip

# 1/sqrt(x): the CPU's 14-bit estimate (vrsqrt14ps), then one Newton-Raphson step
# y - (x y^2 - 1) (y / 2), each operation rounded (no fused multiply-add).
#
# The estimate of x = 2**e * (1 + m / 2**23) depends on e's parity and on m's top 15
# bits: with p = e mod 2, s = m >> 18 (32 segments) and t = (m >> 8) & 1023, it is
# V * 2**-(17 + e // 2), V = (RSQRT14_BASE[p][s] * 256 - RSQRT14_SLOPE[p][s] * t) >> 10,
# except that x = 4**k gives 2**-k exactly (a linear interpolation over each segment,
# read off the instruction's results for every mantissa of [1, 4)).
RSQRT14_BASE = (
    (
        524265, 516257, 508613, 501298, 494286, 487559, 481101, 474897,
        468922, 463169, 457623, 452276, 447106, 442106, 437279, 432603,
        428071, 423683, 419423, 415288, 411277, 407379, 403592, 399907,
        396319, 392827, 389430, 386110, 382879, 379734, 376655, 373658,
    ),
    (
        370709, 365049, 359644, 354468, 349516, 344759, 340193, 335801,
        331581, 327515, 323589, 319805, 316149, 312618, 309201, 305899,
        302695, 299587, 296575, 293657, 290819, 288062, 285380, 282776,
        280242, 277773, 275367, 273022, 270741, 268509, 266336, 264214,
    ),
)  # fmt: skip
RSQRT14_SLOPE = (
    (
        2002, 1910, 1830, 1754, 1682, 1614, 1550, 1494, 1438, 1386, 1338, 1294, 1250, 1206,
        1170, 1134, 1098, 1066, 1034, 1002, 974, 946, 922, 898, 874, 850, 830, 806, 786,
        770, 750, 734,
    ),
    (
        1414, 1350, 1294, 1238, 1190, 1142, 1098, 1054, 1018, 982, 946, 914, 882, 854, 826,
        802, 778, 754, 730, 710, 690, 670, 650, 634, 618, 602, 586, 570, 558, 542, 530, 518,
    ),
)  # fmt: skip
