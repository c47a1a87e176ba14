"""The shared model suite: small, deterministic models that the compiler, runtime,
oracle and benchmark tests all draw from.

Each entry is a ``ModelCase``. A case describes one program (one or more methods):

- ``make()`` builds a fresh eval-mode module with fixed weights, ``inputs()`` its
  example inputs; both are deterministic, so two calls give equal results.
- ``programs()`` normalises single- and multi-method cases into
  ``{method: (module, inputs, dynamic_shapes)}``; ``export(case)`` runs
  ``torch.export.export`` on each of them.
- ``alt_inputs()`` are further valid inputs for the same program (other sizes within
  a dynamic model's bounds, the other branch of a ``cond``).
- ``calls`` > 1 marks a stateful program (mutable buffers): ``call_inputs()`` gives the
  inputs of each consecutive call on one loaded method, and outputs depend on the
  state accumulated by the previous calls.

Only torch is imported here; the official package is wrapped in ``official.py``.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

# Bump to invalidate every cached official export (see official.py).
SUITE_VERSION = 1

Inputs = tuple[Any, ...]
MethodSpec = tuple[nn.Module, Inputs, Any]


@dataclass(frozen=True)
class ModelCase:
    name: str
    make: Callable[[], nn.Module]
    inputs: Callable[[], Inputs]
    # torch.export dynamic_shapes for the forward method (Dims with explicit max).
    dynamic_shapes: Any = None
    # Other valid inputs for the same program: sizes within bounds, other branches.
    alt_inputs: Callable[[], list[Inputs]] | None = None
    # Multi-method programs: method name -> (fresh module, inputs). Replaces make/inputs
    # for export; make/inputs then describe the "forward" entry.
    methods: Callable[[], dict[str, tuple[nn.Module, Inputs]]] | None = None
    constant_methods: dict[str, Any] = field(default_factory=dict)
    # Stateful programs: number of consecutive calls and the inputs of each call.
    calls: int = 1
    call_inputs: Callable[[], list[Inputs]] | None = None
    rtol: float = 1e-4
    atol: float = 1e-5
    # False where the official exporter cannot produce a program; official_failure
    # says why, and tests/test_official_oracle.py checks that it still fails.
    official_exportable: bool = True
    official_failure: str = ""
    # Non-empty where the official runtime computes something other than eager (a bug
    # in an official kernel); the oracle test checks that it still differs.
    official_mismatch: str = ""
    # (rtol, atol) for comparing the official runtime with eager, where its kernels
    # round differently from eager (None: the case's own rtol/atol).
    official_tol: tuple[float, float] | None = None
    # ExecutorchBackendConfig fields pyexecutorch's to_executorch needs for this case:
    # our opt-ins beyond the official exporter (emit_while_loop).
    backend_options: dict[str, Any] = field(default_factory=dict)
    tags: frozenset[str] = frozenset()

    def __post_init__(self):
        if self.calls > 1 and self.call_inputs is None:
            raise ValueError(f"{self.name}: calls={self.calls} needs call_inputs")
        if not self.official_exportable and not self.official_failure:
            raise ValueError(f"{self.name}: official_exportable=False needs a reason")

    def programs(self) -> dict[str, MethodSpec]:
        """``{method: (fresh module, inputs, dynamic_shapes)}`` for every method."""
        if self.methods is not None:
            return {k: (m, inp, None) for k, (m, inp) in self.methods().items()}
        return {"forward": (self.make(), self.inputs(), self.dynamic_shapes)}

    def call_sequence(self) -> list[Inputs]:
        """Inputs of each consecutive call on one loaded forward method."""
        if self.call_inputs is not None:
            seq = self.call_inputs()
            assert len(seq) == self.calls, self.name
            return seq
        return [self.inputs()]

    def all_inputs(self) -> list[Inputs]:
        """The example inputs followed by the alternative inputs (forward only)."""
        return [self.inputs(), *(self.alt_inputs() if self.alt_inputs else [])]

    @property
    def stateful(self) -> bool:
        return self.calls > 1

    def replace(self, **kw) -> ModelCase:
        return dataclasses.replace(self, **kw)


def export(case: ModelCase) -> dict[str, torch.export.ExportedProgram]:
    """``torch.export.export`` of every method of ``case``."""
    out = {}
    for meth, (module, inputs, dyn) in case.programs().items():
        with torch.no_grad(), warnings.catch_warnings():
            # nn.LSTM/GRU re-assign their flat weight list while being traced.
            warnings.filterwarnings("ignore", message="The tensor attributes .*_flat_weights")
            out[meth] = torch.export.export(module, inputs, dynamic_shapes=dyn)
    return out


# --------------------------------------------------------------------------------------
# Input helpers (a private generator per call keeps inputs independent of global state)


def randn(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def randint(low, high, *shape, seed=0, dtype=torch.int64):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g, dtype=dtype)


def _fresh(cls, *args, seed=0, dtype=None, **kw):
    """Build ``cls(*args, **kw)`` with fixed weights, in eval mode."""

    def make():
        torch.manual_seed(seed)
        m = cls(*args, **kw).eval()
        if dtype is not None:
            m = m.to(dtype)
        return m

    make.__qualname__ = f"make_{cls.__name__}"
    return make


def _perturb_norm_stats(m: nn.Module) -> nn.Module:
    """Give BatchNorm layers non-trivial running stats and affine params."""
    g = torch.Generator().manual_seed(123)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d | nn.BatchNorm1d):
            n = mod.num_features
            mod.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
            mod.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
    return m


# --------------------------------------------------------------------------------------
# Models


class MLP(nn.Module):
    def __init__(self, d_in=16, d_hidden=32, d_out=8):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.fc3 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        _perturb_norm_stats(self)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        return F.relu6(self.bn2(self.conv2(x)))


class DepthwiseConv(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.dw_s2 = nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c, bias=False)
        self.pw = nn.Conv2d(c, 16, 1)

    def forward(self, x):
        return self.pw(F.relu(self.dw_s2(F.relu(self.dw(x)))))


class Pooling(nn.Module):
    def forward(self, x):
        a = F.max_pool2d(x, 2)
        b = F.avg_pool2d(x, 3, stride=2, padding=1)
        c = F.adaptive_avg_pool2d(x, (1, 1))
        d = F.max_pool2d(x, 3, stride=1, padding=1)
        e = F.adaptive_avg_pool2d(x, (2, 2))
        return a, b, c, d, e


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.gn = nn.GroupNorm(2, 8)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-0.5, 0.5)

    def forward(self, x, y):
        # x: [B, T, 16], y: [B, 8, H, W]
        return self.ln(x), self.gn(y)


class EmbeddingBag(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 12)
        self.fc = nn.Linear(12, 4)

    def forward(self, idx):
        e = self.emb(idx)  # [B, T, 12]
        return self.fc(e.mean(dim=1)), e


class CausalSelfAttention(nn.Module):
    def __init__(self, d=32, heads=4, sdpa=True):
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(64, 64, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / (k.shape[-1] ** 0.5))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
            y = torch.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class GPTBlock(nn.Module):
    def __init__(self, d=32, heads=4, sdpa=True):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, sdpa)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_out = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=1, ctx=16, sdpa=True):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(GPTBlock(d, heads, sdpa) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


class LSTMModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.fc(out[:, -1]), h, c


class GRUModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 12, batch_first=True)
        self.fc = nn.Linear(12, 4)

    def forward(self, x, h0):
        out, h = self.gru(x, h0)
        return self.fc(out), h


class Indexing(nn.Module):
    def forward(self, x, idx, gidx):
        # x: [4, 6, 5] float, idx: [3] int64, gidx: [4, 6, 2] int64
        a = torch.index_select(x, 1, idx)
        b = torch.gather(x, 2, gidx)
        c = torch.narrow(x, 2, 1, 3)
        d = x[idx]  # advanced indexing on dim 0
        e = x[:, 1:5:2, -2:]
        f = x[..., 0]
        g = x[idx, :, idx]  # two index tensors, broadcast
        h = x.select(1, -1)
        return a, b, c, d, e, f, g, h


class ShapeOps(nn.Module):
    def forward(self, x, y):
        # x: [2, 3, 4], y: [2, 3, 4]
        c = torch.cat([x, y], dim=1)
        s0, s1 = torch.split(c, [2, 4], dim=1)
        st = torch.stack([x, y], dim=0)
        p = x.permute(2, 0, 1).contiguous()
        e = x[:, :1, :].expand(2, 5, 4)
        r = y.reshape(6, 4).t()
        u = x.unsqueeze(1).squeeze(1).flatten(1)
        ch = torch.chunk(y, 2, dim=2)
        rep = x[:1].repeat(2, 1, 2)
        return c, s0 * 2, s1, st, p, e + 1, r, u, ch[0] - ch[1], rep, y.transpose(0, 2)


class Reductions(nn.Module):
    def forward(self, x):
        return (
            x.sum(dim=1, keepdim=True),
            x.mean(dim=(0, 2)),
            x.amax(dim=-1, keepdim=True),
            x.amin(dim=0),
            x.var(dim=1, keepdim=True),
            x.var(dim=2, unbiased=False),
            x.prod(dim=2, keepdim=True),
            x.sum(),
            x.max(dim=1).values,
            torch.std(x, dim=-1),
            x.norm(dim=-1),
        )


class WhereMask(nn.Module):
    def forward(self, x, y, mask):
        a = torch.where(x > 0, x, y)
        b = x.masked_fill(mask, -1.5)
        c = torch.where(mask, x * 2, 0.25)
        d = torch.clamp(x, -0.5, 0.5)
        return a, b, c, d


class Cumsum(nn.Module):
    def forward(self, x, n):
        return torch.cumsum(x, dim=1), torch.cumsum(n, dim=0), x.cumsum(dim=-1) * 0.5


class ArgmaxTopk(nn.Module):
    def forward(self, x):
        v, i = torch.topk(x, 3, dim=-1)
        vs, iss = torch.topk(x, 2, dim=0, largest=False)
        return torch.argmax(x, dim=-1), torch.argmin(x, dim=0, keepdim=True), v, i, vs, iss


class IntArith(nn.Module):
    def forward(self, a, b, c):
        # a, b: int64 (b has no zeros), c: int32
        return (
            a + b * 3,
            a - c,  # int64 - int32 -> int64
            a // b,  # floor division, negative operands included
            # (integer remainder is in int_remainder)
            c * c - 5,
            torch.div(a, b, rounding_mode="trunc"),
            torch.abs(c),
            a.sum(dim=0),
            (c + 1).to(torch.int64) * a,
            torch.maximum(a, b),
        )


class IntRemainder(nn.Module):
    def forward(self, a, b):
        # b has negative entries and no zeros
        return torch.remainder(a, b), a % b, a % 7, torch.remainder(a, -3), torch.fmod(a, b)


class BoolOps(nn.Module):
    def forward(self, x, y, p, q):
        # x, y: float; p, q: bool
        gt = x > y
        le = x <= 0.5
        eq = (x.round() == y.round()) | (x != x)
        return (
            torch.logical_and(p, q),
            torch.logical_or(p, gt),
            torch.logical_not(q),
            torch.logical_xor(gt, le),
            eq,
            p & ~q,
            (p.to(torch.float32) + x),
            gt.any(dim=1),
            le.all(dim=0),
        )


class Fp16Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.ln = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        h = self.ln(F.relu(self.fc1(x)))
        return self.fc2(h), torch.softmax(h, dim=-1)


class ScalarInput(nn.Module):
    def forward(self, x, alpha: float, n: int):
        return x * alpha + n, (x + alpha).sum() * n


class NestedOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        h = self.fc(x)
        return h, {"relu": F.relu(h), "pair": (h.sum(dim=-1), h * 2)}, [h.mean()]


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return torch.tanh(self.fc(x))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)

    def forward(self, z):
        return torch.sigmoid(self.fc(z))


class Accumulator(nn.Module):
    """A running sum in a buffer: every call adds its input to the state."""

    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.linspace(-1.0, 1.0, 12).reshape(3, 4))
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.acc.add_(x)
        self.count.add_(1.0)
        return self.acc * 2.0, self.acc.sum() / self.count


class KVCache(nn.Module):
    """Single-head attention decoding one token per call with a KV cache."""

    def __init__(self, d=8, max_len=6):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.register_buffer("k_cache", torch.zeros(1, max_len, d))
        self.register_buffer("v_cache", torch.zeros(1, max_len, d))
        self.register_buffer("pos_ids", torch.arange(max_len))

    def forward(self, x, pos):
        # x: [1, 1, d], pos: [1] int64
        self.k_cache.index_copy_(1, pos, self.k(x))
        self.v_cache[:, pos] = self.v(x)
        att = (self.q(x) @ self.k_cache.transpose(1, 2)) / (x.shape[-1] ** 0.5)
        att = att.masked_fill(self.pos_ids > pos, float("-inf"))
        return torch.softmax(att, dim=-1) @ self.v_cache


class Cond(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        def true_fn(x):
            return self.fc(x).relu()

        def false_fn(x):
            return (x * -2.0).sin()

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))


class WhileLoop(nn.Module):
    def forward(self, x, n):
        from torch._higher_order_ops.while_loop import while_loop

        def cond_fn(i, acc):
            return i < n

        def body_fn(i, acc):
            return i + 1, acc * 0.5 + 1.0

        _, out = while_loop(cond_fn, body_fn, (torch.zeros_like(n), x))
        return out


class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 16, 3, padding=1, groups=16),
            nn.Conv2d(16, 32, 1),
            nn.ReLU(),
        )
        self.classifier = nn.Linear(32, classes)
        _perturb_norm_stats(self)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(x)


class TransformerEncoder(nn.Module):
    def __init__(self, d=32, heads=4, layers=2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d, heads, dim_feedforward=64, dropout=0.0, batch_first=True, norm_first=True
        )
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.inp = nn.Linear(8, d)
        self.out = nn.Linear(d, 3)

    def forward(self, x):
        return self.out(self.enc(self.inp(x)).mean(dim=1))


class Activations(nn.Module):
    def forward(self, x):
        return (
            F.gelu(x),
            F.gelu(x, approximate="tanh"),
            F.silu(x),
            torch.sigmoid(x),
            torch.tanh(x),
            F.hardswish(x),
            F.hardtanh(x),
            F.elu(x),
            F.leaky_relu(x, 0.1),
            torch.softmax(x, dim=-1),
            torch.log_softmax(x, dim=1),
        )


class Elementwise(nn.Module):
    def forward(self, x, y):
        ax = x.abs() + 0.1
        return (
            torch.exp(x),
            torch.log(ax),
            torch.sqrt(ax),
            torch.rsqrt(ax),
            torch.pow(ax, 1.5),
            x**2,
            -x,
            torch.sin(x) + torch.cos(y),
            torch.floor(x * 3),
            torch.ceil(x * 3),
            torch.round(x * 3),
            x / (y.abs() + 1),
            torch.div(x * 5, y.abs() + 1, rounding_mode="floor"),
            torch.maximum(x, y) - torch.minimum(x, y),
            torch.reciprocal(ax),
            torch.erf(x),
            torch.atan2(x, y),
        )


class Matmuls(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5))
        self.b = nn.Parameter(torch.randn(5))

    def forward(self, a, b, c):
        # a: [2, 3, 4], b: [2, 4, 6], c: [4, 6]
        return (
            torch.bmm(a, b),
            a @ c,
            torch.addmm(self.b, c, self.w),
            torch.einsum("bij,bjk->bik", a, b) @ self.w,
            torch.mm(c, self.w),
        )


class ConvTransposeUpsample(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)
        self.conv1d = nn.Conv1d(4, 6, 3, padding=2, dilation=2)

    def forward(self, x, s):
        # x: [1, 4, 5, 5], s: [2, 4, 10]
        a = self.up(x)
        b = F.interpolate(x, scale_factor=2, mode="nearest")
        c = F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=False)
        d = F.pad(x, (1, 2, 0, 1), value=0.5)
        return a, b, c, d, self.conv1d(s)


# --------------------------------------------------------------------------------------
# The registry

_batch = Dim("batch", min=1, max=8)


def _mm_methods():
    torch.manual_seed(7)
    enc, dec = Encoder().eval(), Decoder().eval()
    return {"forward": (enc, (randn(2, 8, seed=1),)), "decode": (dec, (randn(3, 4, seed=2),))}


def _kv_calls():
    return [(randn(1, 1, 8, seed=10 + i), torch.tensor([i])) for i in range(3)]


def _signed_divisor(*shape, seed=0):
    """int64 values in [-8, 8] without zeros."""
    sign = torch.where(randint(0, 2, *shape, seed=seed + 1) > 0, 1, -1)
    return randint(1, 9, *shape, seed=seed) * sign


def _int_inputs():
    a = randint(-50, 50, 5, 4, seed=1)
    c = randint(-20, 20, 5, 4, seed=4, dtype=torch.int32)
    return a, _signed_divisor(5, 4, seed=2), c


def _bool_inputs():
    x, y = randn(4, 5, seed=1), randn(4, 5, seed=2)
    return x, y, randn(4, 5, seed=3) > 0, randn(4, 5, seed=4) > 0


CASES: list[ModelCase] = [
    ModelCase("mlp", _fresh(MLP), lambda: (randn(4, 16),), tags=frozenset({"linear"})),
    ModelCase(
        "conv_bn",
        _fresh(ConvBN),
        lambda: (randn(2, 3, 12, 12),),
        tags=frozenset({"conv"}),
    ),
    ModelCase(
        "depthwise_conv",
        _fresh(DepthwiseConv),
        lambda: (randn(1, 8, 10, 10),),
        tags=frozenset({"conv"}),
    ),
    ModelCase(
        "pooling",
        _fresh(Pooling),
        lambda: (randn(2, 3, 8, 8),),
        tags=frozenset({"conv", "pool"}),
    ),
    ModelCase(
        "norms",
        _fresh(Norms),
        lambda: (randn(2, 5, 16, seed=1), randn(2, 8, 4, 4, seed=2)),
        tags=frozenset({"norm"}),
    ),
    ModelCase(
        "embedding",
        _fresh(EmbeddingBag),
        lambda: (randint(0, 50, 3, 7),),
        tags=frozenset({"embedding"}),
    ),
    ModelCase(
        "gpt_block_sdpa",
        _fresh(TinyGPT, sdpa=True),
        lambda: (randint(0, 64, 2, 16),),
        tags=frozenset({"transformer", "attention"}),
    ),
    ModelCase(
        "gpt_block_manual",
        _fresh(TinyGPT, sdpa=False),
        lambda: (randint(0, 64, 2, 12),),
        tags=frozenset({"transformer", "attention"}),
    ),
    ModelCase(
        "lstm",
        _fresh(LSTMModel),
        lambda: (randn(2, 5, 8),),
        tags=frozenset({"rnn"}),
    ),
    ModelCase(
        "gru",
        _fresh(GRUModel),
        lambda: (randn(2, 5, 8, seed=1), randn(1, 2, 12, seed=2)),
        tags=frozenset({"rnn"}),
    ),
    ModelCase(
        "indexing",
        _fresh(Indexing),
        lambda: (
            randn(4, 6, 5),
            torch.tensor([2, 0, 3]),
            randint(0, 5, 4, 6, 2, seed=1),
        ),
        tags=frozenset({"indexing"}),
    ),
    ModelCase(
        "shape_ops",
        _fresh(ShapeOps),
        lambda: (randn(2, 3, 4, seed=1), randn(2, 3, 4, seed=2)),
        tags=frozenset({"shape"}),
    ),
    ModelCase(
        "reductions",
        _fresh(Reductions),
        lambda: (randn(3, 4, 5) * 0.5 + 1.0,),
        tags=frozenset({"reduction"}),
    ),
    ModelCase(
        "where_mask",
        _fresh(WhereMask),
        lambda: (randn(3, 4, seed=1), randn(3, 4, seed=2), randn(3, 4, seed=3) > 0),
        tags=frozenset({"elementwise", "bool"}),
    ),
    ModelCase(
        "cumsum",
        _fresh(Cumsum),
        lambda: (randn(3, 6), randint(-5, 5, 7)),
        tags=frozenset({"reduction", "int"}),
    ),
    ModelCase(
        "argmax_topk",
        _fresh(ArgmaxTopk),
        lambda: (randn(4, 7),),
        tags=frozenset({"reduction", "int"}),
    ),
    ModelCase("int_arith", _fresh(IntArith), _int_inputs, tags=frozenset({"int"})),
    ModelCase(
        "int_remainder",
        _fresh(IntRemainder),
        lambda: (randint(-50, 50, 4, 6, seed=1), _signed_divisor(4, 6, seed=2)),
        # The official portable remainder kernels on integers compute C's fmod (sign of
        # the dividend) where torch takes the sign of the divisor: -7 % 3 gives -1, not 2.
        official_mismatch="official integer remainder takes the dividend's sign (fmod)",
        tags=frozenset({"int"}),
    ),
    ModelCase("bool_ops", _fresh(BoolOps), _bool_inputs, tags=frozenset({"bool"})),
    ModelCase(
        "float16",
        _fresh(Fp16Model, dtype=torch.float16),
        lambda: (randn(4, 16, dtype=torch.float16),),
        rtol=1e-3,
        atol=1e-3,
        # The official portable linear accumulates in float16: up to ~6 ulp off eager.
        official_tol=(1e-2, 5e-3),
        tags=frozenset({"float16", "linear"}),
    ),
    ModelCase(
        "scalar_input",
        _fresh(ScalarInput),
        # torch.export specialises Python scalars: the program takes them as inputs
        # but only accepts the exported values.
        lambda: (randn(2, 3), 2.5, 3),
        tags=frozenset({"scalar"}),
    ),
    ModelCase(
        "nested_outputs",
        _fresh(NestedOutputs),
        lambda: (randn(3, 6),),
        tags=frozenset({"pytree"}),
    ),
    ModelCase(
        "multi_method",
        _fresh(Encoder, seed=7),
        lambda: (randn(2, 8, seed=1),),
        methods=_mm_methods,
        constant_methods={"vocab_size": 32, "scale": 0.5, "use_cache": True},
        tags=frozenset({"multi_method"}),
    ),
    ModelCase(
        "dynamic_batch",
        _fresh(MLP),
        lambda: (randn(4, 16),),
        dynamic_shapes=({0: _batch},),
        alt_inputs=lambda: [
            (randn(1, 16, seed=1),),
            (randn(3, 16, seed=2),),
            (randn(8, 16, seed=3),),
        ],
        tags=frozenset({"dynamic", "linear"}),
    ),
    ModelCase(
        "mutable_buffer",
        _fresh(Accumulator),
        lambda: (randn(3, 4),),
        calls=3,
        call_inputs=lambda: [(randn(3, 4, seed=i),) for i in range(3)],
        tags=frozenset({"stateful"}),
    ),
    ModelCase(
        "kv_cache",
        _fresh(KVCache),
        lambda: _kv_calls()[0],
        calls=3,
        call_inputs=_kv_calls,
        tags=frozenset({"stateful", "attention"}),
    ),
    ModelCase(
        "cond",
        _fresh(Cond),
        lambda: (randn(2, 4).abs(),),
        alt_inputs=lambda: [(-randn(2, 4, seed=1).abs(),)],
        tags=frozenset({"control_flow"}),
    ),
    ModelCase(
        "while_loop",
        _fresh(WhileLoop),
        lambda: (randn(2, 3), torch.tensor(4)),
        alt_inputs=lambda: [(randn(2, 3, seed=1), torch.tensor(0))],
        official_exportable=False,
        # The official emitter: "Unsupported control flow operator: while_loop"; ours
        # refuses it too unless asked.
        official_failure="to_executorch cannot emit torch.ops.higher_order.while_loop",
        backend_options={"emit_while_loop": True},
        tags=frozenset({"control_flow"}),
    ),
    ModelCase(
        "small_cnn",
        _fresh(SmallCNN),
        lambda: (randn(1, 3, 32, 32),),
        tags=frozenset({"conv", "realistic"}),
    ),
    ModelCase(
        "transformer_encoder",
        _fresh(TransformerEncoder),
        lambda: (randn(2, 10, 8),),
        tags=frozenset({"transformer", "realistic"}),
    ),
    ModelCase(
        "activations",
        _fresh(Activations),
        lambda: (randn(3, 8) * 3,),
        tags=frozenset({"elementwise"}),
    ),
    ModelCase(
        "elementwise",
        _fresh(Elementwise),
        lambda: (randn(4, 5, seed=1), randn(4, 5, seed=2)),
        tags=frozenset({"elementwise"}),
    ),
    ModelCase(
        "matmuls",
        _fresh(Matmuls),
        lambda: (randn(2, 3, 4, seed=1), randn(2, 4, 6, seed=2), randn(4, 6, seed=3)),
        tags=frozenset({"linear"}),
    ),
    ModelCase(
        "conv_transpose_upsample",
        _fresh(ConvTransposeUpsample),
        lambda: (randn(1, 4, 5, 5, seed=1), randn(2, 4, 10, seed=2)),
        tags=frozenset({"conv"}),
    ),
]

CASES_BY_NAME: dict[str, ModelCase] = {c.name: c for c in CASES}
assert len(CASES_BY_NAME) == len(CASES), "duplicate case names"


def get_case(name: str) -> ModelCase:
    return CASES_BY_NAME[name]


def cases(tag: str | None = None, official_exportable: bool | None = None) -> list[ModelCase]:
    """Filter the suite by tag and/or by whether the official exporter handles it."""
    out = CASES
    if tag is not None:
        out = [c for c in out if tag in c.tags]
    if official_exportable is not None:
        out = [c for c in out if c.official_exportable == official_exportable]
    return out
