"""The arithmetic of sliding windows, one definition of each fact, for every tier.

A window of ``k`` taps ``dilation`` apart slides over one axis of ``size`` inputs by
``stride``, with ``pad_before`` / ``pad_after`` positions of padding at the ends: output
``o``'s tap ``t`` reads input ``o * stride - pad_before + t * dilation``. Convolutions
(forward and transposed), pooling, the load-time fast paths, the compiled forms and the
XNNPACK interpreter all ask these functions which taps fall inside the image and how large
an output is. :func:`span_inside` and :func:`rows_read` use only integer arithmetic and no
other function, so numba compiles them too: the compiled kernels inline them into their
loops.
"""

from __future__ import annotations


def extent(k: int, dilation: int) -> int:
    """The inputs one window spans: ``dilation * (k - 1) + 1``."""
    return dilation * (k - 1) + 1


def out_size(
    size: int,
    k: int,
    stride: int,
    dilation: int,
    pad_before: int,
    pad_after: int,
    ceil_mode: bool = False,
) -> int:
    """The outputs of a window sliding over ``size`` inputs padded on both ends.

    With ``ceil_mode`` (pooling) a last partial window counts when it starts inside the
    input or its leading padding, as torch rounds; otherwise only whole windows count.
    The result may be zero or negative: callers refuse it in their own words.
    """
    span = size + pad_before + pad_after - extent(k, dilation)
    if not ceil_mode:
        return span // stride + 1
    out = (span + stride - 1) // stride + 1
    if (out - 1) * stride >= size + pad_before:
        out -= 1
    return out


def transposed_out_size(
    size: int, k: int, stride: int, dilation: int, pad_before: int, pad_after: int, extra: int
) -> int:
    """The outputs of a transposed window (a convolution's gradient) over ``size`` inputs:
    every input spread over its window, ``extra`` positions added at the end (torch's
    ``output_padding``, XNNPACK's adjustment), the padding cropped."""
    return (size - 1) * stride + extent(k, dilation) + extra - pad_before - pad_after


def span_inside(start: int, step: int, count: int, size: int) -> tuple[int, int]:
    """``[lo, hi)``: the indices ``i < count`` whose position ``start + i * step`` lies in
    ``[0, size)`` (``lo == hi`` when none does); ``step`` is positive.

    Output ``o`` of tap ``t`` reads ``o * stride + (t * dilation - pad)``: the outputs a tap
    reads the image for are ``span_inside(t * dilation - pad, stride, n_out, size)``, the
    taps of an output that read it ``span_inside(o * stride - pad, dilation, k, size)``.
    """
    if step == 1:  # (no division: in the compiled kernels' loops it costs tens of cycles)
        lo = max(0, -start)
        hi = min(count, size - start)
    else:
        lo = 0 if start >= 0 else (step - 1 - start) // step
        hi = min(count, (size - start + step - 1) // step) if size > start else 0
    return lo, max(lo, hi)


def outputs_reading(
    size: int, n_out: int, stride: int, pad: int, dilation: int, tap: int
) -> tuple[int, int]:
    """``[lo, hi)``: the outputs whose tap ``tap`` reads inside the ``size`` inputs."""
    return span_inside(tap * dilation - pad, stride, n_out, size)


def inputs_landing(
    size: int, n_out: int, stride: int, pad: int, dilation: int, tap: int
) -> tuple[int, int]:
    """``[lo, hi)``: of a transposed window over ``size`` inputs, the inputs whose tap
    ``tap`` lands inside the ``n_out`` outputs (input ``i`` lands at
    ``i * stride - pad + tap * dilation``)."""
    return span_inside(tap * dilation - pad, stride, size, n_out)


def taps_reading(
    size: int, k: int, stride: int, pad: int, dilation: int, n_out: int
) -> tuple[int, int] | None:
    """``(first, last)``: the taps that read inside the image for some output; None when
    every tap reads only padding."""
    reads = [t for t in range(k) if _reads(size, n_out, stride, pad, dilation, t)]
    return (reads[0], reads[-1]) if reads else None


def taps_inside(size: int, n_out: int, k: int, stride: int, pad: int, dilation: int) -> int:
    """The taps that read inside the image, summed over the ``n_out`` outputs."""
    return sum(
        hi - lo
        for lo, hi in (outputs_reading(size, n_out, stride, pad, dilation, t) for t in range(k))
    )


def taps_each(size: int, n_out: int, k: int, stride: int, pad: int, dilation: int) -> list[int]:
    """Per output, its taps that read inside the image (an average's divisor without the
    padding)."""
    spans = (span_inside(o * stride - pad, dilation, k, size) for o in range(n_out))
    return [hi - lo for lo, hi in spans]


def windows_span(n_out: int, k: int, stride: int, dilation: int) -> int:
    """The inputs ``n_out`` windows cover, from the first one's start to the last one's end."""
    return (n_out - 1) * stride + extent(k, dilation)


def rows_read(
    o0: int, o1: int, size: int, k: int, stride: int, pad: int, dilation: int
) -> tuple[int, int]:
    """``[r0, r1)``: the inputs inside the image from the first window's start to the last
    one's end of outputs ``[o0, o1)``, which holds every input they read (with a stride
    or dilation skipping some); empty, ``r0 == r1``, when they read only padding."""
    r0 = min(size, max(0, o0 * stride - pad))
    r1 = min(size, (o1 - 1) * stride - pad + dilation * (k - 1) + 1)  # (self-contained: numba)
    return r0, max(r0, r1)


def tap_phase(tap: int, stride: int, dilation: int, offset: int = 0) -> tuple[int, int]:
    """``(phase, shift)`` of a tap whose position is ``tap * dilation - offset``: the
    stride phase it reads (its position modulo the stride) and its shift in whole strides
    (so that output ``o`` reads position ``(o + shift) * stride + phase``)."""
    shift, phase = divmod(tap * dilation - offset, stride)
    return phase, shift


def _reads(size: int, n_out: int, stride: int, pad: int, dilation: int, tap: int) -> bool:
    lo, hi = outputs_reading(size, n_out, stride, pad, dilation, tap)
    return lo < hi
