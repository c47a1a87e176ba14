"""Polynomial coefficients shared by the numpy kernels and the compiled tier's math.

Both tiers evaluate float32 erf with the same rational, so that they round alike; it
lives here, below both (this module imports nothing, numba least of all).
"""

# float32 erf as z * P(t) / Q(t), t = z * z on z clamped to [-4, 4] (error ~3e-9 in
# float64): the coefficients of P and of Q, highest power first.
ERF_P = (
    -1.336023425824454e-08, 4.715109375076983e-06, 0.00038085896070203684,
    0.0038564779867461874, 0.05435400339419299, 0.1852799983220758,
    1.1283791680791535,
)  # fmt: skip
ERF_Q = (
    6.340348258765947e-05, 0.0013106910328099625, 0.015479842987845145,
    0.11401401340778994, 0.4975335209161188, 1.0,
)  # fmt: skip
