"""Real architectures, written from their papers as a new user would build them, as
``ModelCase`` entries (see models.py) with small random weights and small inputs.

Each network keeps its paper's full block structure (strides, paddings, residuals,
activations, normalisations) with reduced widths and depths, so that exporting,
partitioning and running it exercises what the full-size model does, in well under a
second. Nothing is downloaded: the transformer ones are Hugging Face ``transformers``
models built from small configs, returning a plain tensor.

- ``resnet18``: basic blocks [2, 2, 2, 2], a 7x7/2 stem and 3x3/2 max pooling, 1x1/2
  projection shortcuts (He et al. 2015), 64x64.
- ``mobilenet_v2``: inverted residuals with linear bottlenecks and ReLU6, the paper's
  (t, c, n, s) table at width 0.25 (Sandler et al. 2018), 64x64.
- ``mobilenet_v3``: MobileNetV3-Small: hardswish, squeeze-excite with a hard sigmoid,
  5x5 depthwise kernels (Howard et al. 2019), width 0.5, 64x64.
- ``efficientnet``: EfficientNet-B0's MBConv stages (SiLU, squeeze-excite, 3x3 and 5x5
  depthwise) at width 0.25 and one block per stage (Tan & Le 2019), 64x64.
- ``squeezenet``: SqueezeNet 1.1 fire modules and ceil-mode max pooling, classifier by
  1x1 convolution and global pooling (Iandola et al. 2016), 64x64.
- ``shufflenet_v2``: ShuffleNet V2 units with channel split and channel shuffle (Ma et
  al. 2018), width 0.5 stage channels, 64x64.
- ``convnext``: ConvNeXt blocks: depthwise 7x7, LayerNorm over channels (channels-last),
  inverted MLP with GELU, layer scale; 4x4/4 patchify stem (Liu et al. 2022), 64x64.
- ``vit``: a Vision Transformer: 8x8 patches, class token, learned positions, pre-norm
  encoder blocks (Dosovitskiy et al. 2020), 32x32.
- ``gpt2``, ``llama``, ``bert``: ``transformers``' GPT2LMHeadModel, LlamaForCausalLM
  (RMSNorm, rotary embeddings, grouped-query attention, SiLU-gated MLP) and BertModel
  at width 32, two layers, over 16 tokens.

Every case is tagged ``architecture``; ``ARCH_CASES`` lists them and ``get_arch(name)``
finds one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from tests.models import ModelCase, _perturb_norm_stats, randint, randn

# The official exports of these cases are cached keyed by the sources of the functions
# that build them; the blocks below are not all reachable from there, so the key
# includes a digest of this whole file (see _fresh).
_SOURCE_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _fresh(cls, *args, seed: int = 0, **kw):
    """``make()`` building ``cls(*args, **kw)`` with fixed weights, in eval mode, with
    non-trivial BatchNorm statistics."""
    digest = _SOURCE_DIGEST

    def make():
        _ = digest  # read here, so that it is in the closure the cache key hashes
        torch.manual_seed(seed)
        return _perturb_norm_stats(cls(*args, **kw)).eval()

    make.__qualname__ = f"make_{cls.__name__}"
    return make


def _divisible(v: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of ``divisor`` (never down by more than 10%),
    as the MobileNet and EfficientNet reference code does."""
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * v else out


def conv_bn(cin, cout, k, stride=1, groups=1, act: type[nn.Module] | None = nn.ReLU):
    """Convolution (``k // 2`` padding, no bias) + BatchNorm (+ activation)."""
    layers = [
        nn.Conv2d(cin, cout, k, stride, padding=k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------------------
# ResNet-18


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, widths=(8, 16, 32, 64), classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, c = [], widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(c, w, stride), BasicBlock(w, w, 1)))
            c = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# --------------------------------------------------------------------------------------
# MobileNetV2


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = [] if expand == 1 else [conv_bn(cin, hidden, 1, act=nn.ReLU6)]
        layers += [
            conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            conv_bn(hidden, cout, 1, act=None),  # linear bottleneck
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    # (expansion t, channels c, repeats n, first stride s), Table 2 of the paper
    SETTINGS = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]

    def __init__(self, width=0.25, classes=10):
        super().__init__()
        c = _divisible(32 * width)
        last = _divisible(1280 * max(1.0, width))
        layers = [conv_bn(3, c, 3, 2, act=nn.ReLU6)]
        for t, ch, n, s in self.SETTINGS:
            out = _divisible(ch * width)
            for i in range(n):
                layers.append(InvertedResidual(c, out, s if i == 0 else 1, t))
                c = out
        layers.append(conv_bn(c, last // 4, 1, act=nn.ReLU6))  # 1280 reduced to 320
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last // 4, classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------
# MobileNetV3-Small


class SqueezeExcite(nn.Module):
    """Global pooling, a bottleneck of two 1x1 convolutions, a gate on the channels."""

    def __init__(self, c, squeeze, act=nn.ReLU, gate=nn.Hardsigmoid):
        super().__init__()
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.act = act()
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.gate = gate()

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class V3Block(nn.Module):
    def __init__(self, cin, k, exp, cout, se, act, stride):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        layers = [] if exp == cin else [conv_bn(cin, exp, 1, act=act)]
        layers.append(conv_bn(exp, exp, k, stride, groups=exp, act=act))
        if se:
            layers.append(SqueezeExcite(exp, _divisible(exp // 4)))
        layers.append(conv_bn(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNetV3Small(nn.Module):
    # (kernel, expansion, out, squeeze-excite, activation, stride), Table 2 of the paper
    SETTINGS = [
        (3, 16, 16, True, nn.ReLU, 2),
        (3, 72, 24, False, nn.ReLU, 2),
        (3, 88, 24, False, nn.ReLU, 1),
        (5, 96, 40, True, nn.Hardswish, 2),
        (5, 240, 40, True, nn.Hardswish, 1),
        (5, 240, 40, True, nn.Hardswish, 1),
        (5, 120, 48, True, nn.Hardswish, 1),
        (5, 144, 48, True, nn.Hardswish, 1),
        (5, 288, 96, True, nn.Hardswish, 2),
        (5, 576, 96, True, nn.Hardswish, 1),
        (5, 576, 96, True, nn.Hardswish, 1),
    ]

    def __init__(self, width=0.5, classes=10):
        super().__init__()
        c = _divisible(16 * width)
        layers = [conv_bn(3, c, 3, 2, act=nn.Hardswish)]
        for k, exp, out, se, act, s in self.SETTINGS:
            exp, out = _divisible(exp * width), _divisible(out * width)
            layers.append(V3Block(c, k, exp, out, se, act, s))
            c = out
        last = 6 * c
        layers.append(conv_bn(c, last, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(last, 256), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(256, classes)
        )

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------
# EfficientNet-B0


class MBConv(nn.Module):
    def __init__(self, cin, cout, k, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = [] if expand == 1 else [conv_bn(cin, hidden, 1, act=nn.SiLU)]
        layers += [
            conv_bn(hidden, hidden, k, stride, groups=hidden, act=nn.SiLU),
            SqueezeExcite(hidden, max(1, cin // 4), act=nn.SiLU, gate=nn.Sigmoid),
            conv_bn(hidden, cout, 1, act=None),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res else y  # stochastic depth is training only


class EfficientNetB0(nn.Module):
    # (expansion, kernel, stride, channels, repeats) of the seven MBConv stages
    STAGES = [
        (1, 3, 1, 16, 1),
        (6, 3, 2, 24, 2),
        (6, 5, 2, 40, 2),
        (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3),
        (6, 5, 2, 192, 4),
        (6, 3, 1, 320, 1),
    ]

    def __init__(self, width=0.25, max_repeats=1, classes=10):
        super().__init__()
        c = _divisible(32 * width)
        layers = [conv_bn(3, c, 3, 2, act=nn.SiLU)]
        for e, k, s, ch, n in self.STAGES:
            out = _divisible(ch * width)
            for i in range(min(n, max_repeats)):
                layers.append(MBConv(c, out, k, s if i == 0 else 1, e))
                c = out
        # a second block in the last wide stage keeps a stride-1 residual with SE
        layers.append(MBConv(c, c, 3, 1, 6))
        layers.append(conv_bn(c, 4 * c, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(4 * c, classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------
# SqueezeNet 1.1


class Fire(nn.Module):
    def __init__(self, cin, squeeze, expand):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1x1 = nn.Conv2d(squeeze, expand, 1)
        self.expand3x3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        x = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.expand1x1(x)), F.relu(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2),
            nn.ReLU(),
            pool(),
            Fire(32, 8, 32),
            Fire(64, 8, 32),
            pool(),
            Fire(64, 16, 64),
            Fire(128, 16, 64),
            pool(),
            Fire(128, 24, 96),
            Fire(192, 24, 96),
            Fire(192, 32, 128),
            Fire(256, 32, 128),
        )
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Conv2d(256, classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1)
        )

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


# --------------------------------------------------------------------------------------
# ShuffleNet V2


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.shape
    x = x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(b, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                conv_bn(cin, cin, 3, stride, groups=cin, act=None),
                conv_bn(cin, half, 1),
            )
        b2_in = cin if stride > 1 else half
        self.branch2 = nn.Sequential(
            conv_bn(b2_in, half, 1),
            conv_bn(half, half, 3, stride, groups=half, act=None),
            conv_bn(half, half, 1),
        )

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats=(2, 3, 2), channels=(24, 48, 96, 192, 512), classes=10):
        super().__init__()
        self.conv1 = conv_bn(3, channels[0], 3, 2)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, c = [], channels[0]
        for n, out in zip(repeats, channels[1:4], strict=True):
            units = [ShuffleUnit(c, out, 2)] + [ShuffleUnit(out, out, 1) for _ in range(n - 1)]
            stages.append(nn.Sequential(*units))
            c = out
        self.stages = nn.Sequential(*stages)
        self.conv5 = conv_bn(c, channels[4], 1)
        self.fc = nn.Linear(channels[4], classes)

    def forward(self, x):
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


# --------------------------------------------------------------------------------------
# ConvNeXt


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        return super().forward(x).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim, layer_scale=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)  # N, H, W, C
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, depths=(1, 1, 2, 1), dims=(16, 32, 64, 128), classes=10):
        super().__init__()
        self.downsample = nn.ModuleList(
            [nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6))]
        )
        for i in range(3):
            self.downsample.append(
                nn.Sequential(
                    LayerNorm2d(dims[i], eps=1e-6), nn.Conv2d(dims[i], dims[i + 1], 2, stride=2)
                )
            )
        self.stages = nn.ModuleList(
            nn.Sequential(*(ConvNeXtBlock(d) for _ in range(n)))
            for n, d in zip(depths, dims, strict=True)
        )
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)
        # A trained model's layer scales are far from their 1e-6 start (which would make
        # every block an identity): use O(1) ones.
        with torch.no_grad():
            for block in self.modules():
                if isinstance(block, ConvNeXtBlock):
                    block.gamma.uniform_(0.5, 1.5)

    def forward(self, x):
        for down, stage in zip(self.downsample, self.stages, strict=True):
            x = stage(down(x))
        return self.head(self.norm(x.mean([-2, -1])))


# --------------------------------------------------------------------------------------
# Vision Transformer


class ViTAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class ViTBlock(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = ViTAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim)
        )

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image=32, patch=8, dim=48, depth=2, heads=4, classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*(ViTBlock(dim, heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # B, N, D
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


# --------------------------------------------------------------------------------------
# Transformers from Hugging Face configs


class HFLanguageModel(nn.Module):
    """A ``transformers`` model called on token ids, returning one tensor (``logits`` of a
    causal LM, ``last_hidden_state`` of an encoder), as an export script would wrap it."""

    def __init__(self, family: str):
        super().__init__()
        import transformers  # noqa: PLC0415 - heavy, and only these cases need it

        cls, config, self.output = _hf_family(transformers, family)
        config.use_cache = False
        self.model = getattr(transformers, cls)(config)

    def forward(self, input_ids):
        return getattr(self.model(input_ids=input_ids), self.output)


_VOCAB, _TOKENS = 128, 16


def _hf_family(transformers, family: str):
    """(model class, config, output field) of a small ``family`` model."""
    common = dict(vocab_size=_VOCAB, attn_implementation="sdpa")
    if family == "gpt2":
        cfg = transformers.GPT2Config(
            n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0,
            **common,
        )  # fmt: skip
        return "GPT2LMHeadModel", cfg, "logits"
    if family == "llama":
        cfg = transformers.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32, **common,
        )  # fmt: skip
        return "LlamaForCausalLM", cfg, "logits"
    if family == "bert":
        cfg = transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=32, **common,
        )  # fmt: skip
        return "BertModel", cfg, "last_hidden_state"
    raise ValueError(f"unknown transformers family {family!r}")


# --------------------------------------------------------------------------------------
# The registry


def _image(size):
    return lambda: (randn(1, 3, size, size, seed=1),)


def _tokens():
    return (randint(0, _VOCAB, 1, _TOKENS, seed=1),)


def _case(name, make, inputs, *tags, rtol=1e-3, atol=1e-4) -> ModelCase:
    return ModelCase(
        name, make, inputs, rtol=rtol, atol=atol, tags=frozenset({"architecture", *tags})
    )


ARCH_CASES: list[ModelCase] = [
    _case("resnet18", _fresh(ResNet18), _image(64), "conv"),
    _case("mobilenet_v2", _fresh(MobileNetV2), _image(64), "conv"),
    _case("mobilenet_v3", _fresh(MobileNetV3Small), _image(64), "conv"),
    _case("efficientnet", _fresh(EfficientNetB0), _image(64), "conv"),
    _case("squeezenet", _fresh(SqueezeNet), _image(64), "conv", "pool"),
    _case("shufflenet_v2", _fresh(ShuffleNetV2), _image(64), "conv", "shape"),
    _case("convnext", _fresh(ConvNeXt), _image(64), "conv", "norm"),
    _case("vit", _fresh(ViT), _image(32), "transformer", "attention"),
    _case("gpt2", _fresh(HFLanguageModel, "gpt2"), _tokens, "transformer", "attention"),
    _case("llama", _fresh(HFLanguageModel, "llama"), _tokens, "transformer", "attention"),
    _case("bert", _fresh(HFLanguageModel, "bert"), _tokens, "transformer", "attention"),
]

ARCH_CASES_BY_NAME: dict[str, ModelCase] = {c.name: c for c in ARCH_CASES}
assert len(ARCH_CASES_BY_NAME) == len(ARCH_CASES), "duplicate architecture names"


def get_arch(name: str) -> ModelCase:
    return ARCH_CASES_BY_NAME[name]
