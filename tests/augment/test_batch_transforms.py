"""BatchImageTransforms vs torchvision's per-sample kernels and lerobot's ImageTransforms distribution.

Runs in lerobot's environment (torchvision, lerobot); skipped elsewhere.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("torchvision", reason="compares with torchvision's kernels: run in lerobot's environment")
pytest.importorskip("lerobot", reason="compares with lerobot's ImageTransforms: run in lerobot's environment")

from lerobot.transforms import (  # noqa: E402
    ImageTransformConfig,
    ImageTransforms,
    ImageTransformsConfig,
)
from torchvision.transforms.v2 import InterpolationMode  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

from robostream.augment import AffineOp, BatchImageTransforms, Plan  # noqa: E402
from robostream.augment.apply import apply_plans  # noqa: E402

# The tolerances stated in robostream/augment/batch_transforms.py (measured on CPU: 0, 1.8e-6, 2.5e-6, 0, 1.4e-5)
BLEND_TOL = 1e-6  # brightness, contrast, saturation, sharpness
HUE_TOL = 5e-6
CHAIN_TOL = 1e-5  # several ops, the differences carried through
AFFINE_MAX_MOVED = 1e-3  # fraction of pixels whose nearest-neighbour pick may differ
UINT8_MAX_OFF = 1e-3  # fraction of uint8 pixels that may be 1 off (float differences crossing a rounding edge)

FACTOR_FNS = {
    "brightness": F.adjust_brightness,
    "contrast": F.adjust_contrast,
    "saturation": F.adjust_saturation,
    "hue": F.adjust_hue,
    "sharpness": F.adjust_sharpness,
}
ALPHA = 1e-3


def config(
    *tfs: tuple[str, str, dict], max_num: int = 3, random_order: bool = False, enable: bool = True
) -> ImageTransformsConfig:
    if not tfs:
        return ImageTransformsConfig(enable=enable, max_num_transforms=max_num, random_order=random_order)
    return ImageTransformsConfig(
        enable=enable,
        max_num_transforms=max_num,
        random_order=random_order,
        tfs={name: ImageTransformConfig(type=type_, kwargs=kwargs) for name, type_, kwargs in tfs},
    )


def frames(index: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The content of sample `index`, whatever batch it is in."""
    g = torch.Generator().manual_seed(1000 + index)
    x = torch.rand(shape, generator=g)
    return (x * 255).round().to(torch.uint8) if dtype == torch.uint8 else x


def make_batch(
    indices: list[int],
    *,
    window: int = 0,
    dtype: torch.dtype = torch.float32,
    dataset_index: list[int] | None = None,
    cameras: tuple[str, ...] = ("cam",),
) -> dict:
    shape = ((window,) if window else ()) + (3, 24, 32)
    batch: dict = {"index": torch.tensor(indices), "action": torch.randn(len(indices), 4)}
    for c, key in enumerate(cameras):
        batch[key] = torch.stack([frames(i + 100_000 * c, shape, dtype) for i in indices])
    if dataset_index is not None:
        batch["dataset_index"] = torch.tensor(dataset_index)
    return batch


def reference(images: torch.Tensor, plan: Plan) -> torch.Tensor:
    """torchvision's own kernels on one float sample ([C, H, W] or [T, C, H, W]) with the plan's parameters."""
    x = images
    for op in plan.ops:
        if isinstance(op, AffineOp):
            x = F.affine(
                x,
                angle=op.angle,
                translate=list(op.translate),
                scale=op.scale,
                shear=list(op.shear),
                interpolation=InterpolationMode.NEAREST,
                fill=0,
            )
        else:
            x = FACTOR_FNS[op.kind](x, op.factor)
    return x


CASES = {
    "brightness": (config(("b", "ColorJitter", {"brightness": (0.5, 1.5)})), BLEND_TOL),
    "contrast": (config(("c", "ColorJitter", {"contrast": 0.5})), BLEND_TOL),
    "saturation": (config(("s", "ColorJitter", {"saturation": (0.0, 2.0)})), BLEND_TOL),
    "hue": (config(("h", "ColorJitter", {"hue": 0.5})), HUE_TOL),
    "sharpness": (config(("sh", "SharpnessJitter", {"sharpness": (0.0, 3.0)})), BLEND_TOL),
    "affine": (config(("a", "RandomAffine", {"degrees": 30, "translate": (0.2, 0.1)})), 0.0),
    "affine_scale_shear": (
        config(("a", "RandomAffine", {"degrees": (-10, 10), "scale": (0.5, 1.5), "shear": (-5, 5, -3, 3)})),
        0.0,
    ),
    "color_jitter_4": (
        config(("cj", "ColorJitter", {"brightness": 0.3, "contrast": 0.3, "saturation": 0.5, "hue": 0.1})),
        CHAIN_TOL,
    ),
    "default": (config(), CHAIN_TOL),
    "default_random_order_all": (config(max_num=6, random_order=True), CHAIN_TOL),
}


@pytest.mark.parametrize("path", ["cpu", "device"])
@pytest.mark.parametrize("layout", ["float", "uint8", "float_window", "uint8_window"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_torchvision_per_sample(case: str, layout: str, path: str) -> None:
    """Both paths: OpenCV/numpy kernels one sample at a time (what CPU batches take), and the torch kernels step by
    step (what an accelerator's batches take, run here on CPU)."""
    cfg, tol = CASES[case]
    dtype = torch.uint8 if layout.startswith("uint8") else torch.float32
    batch = make_batch(list(range(8)), window=2 if layout.endswith("window") else 0, dtype=dtype)
    tf = BatchImageTransforms(cfg, seed=7, camera_keys=["cam"])
    plans = tf.draw(batch, epoch=3)["cam"]
    out = tf(batch, epoch=3)["cam"] if path == "cpu" else apply_plans(batch["cam"], plans, path="device")
    assert out.shape == batch["cam"].shape and out.dtype == dtype
    images = batch["cam"].float() / 255 if dtype == torch.uint8 else batch["cam"]
    expected = torch.stack([reference(images[i], plan) for i, plan in enumerate(plans)])
    if dtype == torch.uint8:
        expected = (expected * 255).round().clamp(0, 255).to(torch.uint8)
        off = (out.int() - expected.int()).abs()
        assert off.max() <= 1 and (off > 0).float().mean() <= UINT8_MAX_OFF
    elif tol == 0.0:  # affine alone: nearest-neighbour picks, no arithmetic on values
        assert (out != expected).float().mean() <= AFFINE_MAX_MOVED
    else:
        assert (out - expected).abs().max() <= tol


def test_one_channel_images() -> None:
    tf = BatchImageTransforms(config(max_num=6, random_order=True), seed=1, camera_keys=["cam"])
    batch = {"index": torch.arange(8), "cam": torch.rand(8, 1, 24, 32)}
    plans = tf.draw(batch, epoch=0)["cam"]
    expected = torch.stack([reference(batch["cam"][i], plan) for i, plan in enumerate(plans)])
    assert (tf(batch, epoch=0)["cam"] - expected).abs().max() <= CHAIN_TOL


def test_per_sample_draws() -> None:
    tf = BatchImageTransforms(config(max_num=6, random_order=True), seed=5, camera_keys=["top", "wrist"])
    batch = make_batch(list(range(16)), cameras=("top", "wrist"), dataset_index=[0] * 16)
    plans = tf.draw(batch, epoch=0)
    assert len({p.ops for p in plans["top"]}) == 16  # every sample its own parameters
    assert all(a.ops != b.ops for a, b in zip(plans["top"], plans["wrist"], strict=True))  # cameras independent
    out = tf(batch, epoch=0)
    assert out["action"] is batch["action"] and out["index"] is batch["index"]
    assert torch.equal(batch["top"], make_batch(list(range(16)), cameras=("top", "wrist"))["top"])  # input untouched
    assert torch.equal(tf(batch, epoch=0)["top"], out["top"])  # deterministic

    # the same (seed, epoch, dataset_index, index, camera) in another batch, at another position: the same bits
    other = make_batch([40, 3, 11, 7], cameras=("top", "wrist"), dataset_index=[0, 0, 0, 0])
    out_other = tf(other, epoch=0)
    for pos, index in enumerate([3, 11, 7], start=1):
        assert torch.equal(out_other["top"][pos], out["top"][index])
        assert torch.equal(out_other["wrist"][pos], out["wrist"][index])
    # absent dataset_index is 0
    no_source = {k: v for k, v in batch.items() if k != "dataset_index"}
    assert torch.equal(tf(no_source, epoch=0)["top"], out["top"])

    # another epoch, seed or source: other draws
    def differ(a: torch.Tensor, b: torch.Tensor) -> bool:
        return all(not torch.equal(x, y) for x, y in zip(a, b, strict=True))

    assert differ(tf(batch, epoch=1)["top"], out["top"])
    other_seed = BatchImageTransforms(config(max_num=6, random_order=True), seed=6, camera_keys=["top", "wrist"])
    assert differ(other_seed(batch, epoch=0)["top"], out["top"])
    other_source = dict(batch, dataset_index=torch.ones(16, dtype=torch.int64))
    assert differ(tf(other_source, epoch=0)["top"], out["top"])


def test_disabled_is_identity() -> None:
    batch = make_batch(list(range(4)), dtype=torch.uint8)
    for cfg in (config(enable=False), config(("b", "ColorJitter", {"brightness": 0.5}), enable=False)):
        tf = BatchImageTransforms(cfg, seed=0, camera_keys=["cam"])
        out = tf(batch, epoch=0)
        assert not tf.enabled and out["cam"] is batch["cam"] and tf.draw(batch, epoch=0) == {}


def test_replays_lerobot_when_seeded_alike() -> None:
    """torch.manual_seed(plan.seed) before lerobot's transform gives our subset and (within tolerance) our image."""
    cfg = config(max_num=4, random_order=True)
    tf = BatchImageTransforms(cfg, seed=11, camera_keys=["cam"])
    batch = make_batch(list(range(16)), window=2)
    plans, out = tf.draw(batch, epoch=2)["cam"], tf(batch, epoch=2)["cam"]
    lerobot_tf = ImageTransforms(cfg)
    names = {id(t): name for name, t in lerobot_tf.transforms.items()}
    with torch.random.fork_rng():
        for i, plan in enumerate(plans):
            torch.manual_seed(plan.seed)
            theirs = lerobot_tf(batch["cam"][i])
            assert tuple(names[id(t)] for t in lerobot_tf.tf.selected_transforms) == plan.transforms
            assert (theirs - out[i]).abs().max() <= CHAIN_TOL


# --- statistics vs lerobot -------------------------------------------------------------------------------------------

N_DRAWS = 4000


def chi_square_p(table: list[list[int]]) -> float:
    """p-value of Pearson's chi-square test of homogeneity of the rows of a contingency table."""
    counts = torch.tensor(table, dtype=torch.float64)
    counts = counts[:, counts.sum(0) > 0]
    expected = counts.sum(1, keepdim=True) * counts.sum(0, keepdim=True) / counts.sum()
    statistic = ((counts - expected) ** 2 / expected).sum()
    dof = (counts.shape[0] - 1) * (counts.shape[1] - 1)
    return torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), statistic / 2).item()


def chi_square_fit_p(observed: Counter, probabilities: dict) -> float:
    """p-value of Pearson's goodness-of-fit test of counts against known probabilities."""
    n = sum(observed.values())
    statistic = sum((observed.get(k, 0) - n * p) ** 2 / (n * p) for k, p in probabilities.items())
    assert set(observed) <= set(probabilities)
    dof = torch.tensor((len(probabilities) - 1) / 2, dtype=torch.float64)
    return torch.special.gammaincc(dof, torch.tensor(statistic / 2, dtype=torch.float64)).item()


def ks_uniform(values: list[float], lo: float, hi: float) -> tuple[float, float]:
    """Kolmogorov-Smirnov statistic of values vs uniform(lo, hi), and its asymptotic critical value at ALPHA."""
    x = torch.tensor(sorted(values), dtype=torch.float64)
    cdf = ((x - lo) / (hi - lo)).clamp(0, 1)
    n = len(values)
    ranks = torch.arange(1, n + 1, dtype=torch.float64)
    statistic = torch.maximum(ranks / n - cdf, cdf - (ranks - 1) / n).max().item()
    return statistic, math.sqrt(-math.log(ALPHA / 2) / (2 * n))


def lerobot_subsets(cfg: ImageTransformsConfig) -> list[tuple[str, ...]]:
    """N_DRAWS subsets drawn by lerobot's RandomSubsetApply, its transforms swapped for no-op stand-ins named like
    them: only its selection code runs (the parameter draws it skips only shift the stream, not the distribution)."""
    lerobot_tf = ImageTransforms(cfg)
    subset_apply = lerobot_tf.tf
    subset_apply.transforms = [functools.partial(_no_op, name=name) for name in lerobot_tf.transforms]
    image = torch.zeros(3, 2, 2)
    drawn = []
    with torch.random.fork_rng():
        torch.manual_seed(20240601)
        for _ in range(N_DRAWS):
            subset_apply(image)
            drawn.append(tuple(t.keywords["name"] for t in subset_apply.selected_transforms))
    return drawn


def _no_op(image: torch.Tensor, *, name: str) -> torch.Tensor:
    return image


def our_plans(cfg: ImageTransformsConfig, height: int = 96, width: int = 128) -> list[Plan]:
    tf = BatchImageTransforms(cfg, seed=424242, camera_keys=["cam"])
    # draw only reads the shape: a broadcast view of one image stands for N_DRAWS samples
    batch = {"index": torch.arange(N_DRAWS), "cam": torch.zeros(1, 3, height, width).expand(N_DRAWS, -1, -1, -1)}
    return tf.draw(batch, epoch=0)["cam"]


def weighted(cfg: ImageTransformsConfig, weights: list[float]) -> ImageTransformsConfig:
    for tf, weight in zip(cfg.tfs.values(), weights, strict=True):
        tf.weight = weight
    return cfg


@pytest.mark.parametrize(
    "cfg",
    [
        config(),
        config(random_order=True),
        weighted(config(max_num=2), [1.0, 2.0, 4.0, 0.5, 0.0, 3.0]),
        weighted(config(random_order=True), [1.0, 2.0, 4.0, 0.5, 1.0, 3.0]),
    ],
    ids=["uniform", "uniform_random_order", "weighted", "weighted_random_order"],
)
def test_subset_frequencies_match_lerobot(cfg: ImageTransformsConfig) -> None:
    theirs = lerobot_subsets(cfg)
    ours = [plan.transforms for plan in our_plans(cfg)]
    for key in [frozenset, tuple] if cfg.random_order else [frozenset]:
        a, b = Counter(map(key, theirs)), Counter(map(key, ours))
        cells = list(set(a) | set(b))
        assert chi_square_p([[a[c] for c in cells], [b[c] for c in cells]]) > ALPHA, key
    if not cfg.random_order:  # applied in config order, as lerobot's sorted indices
        order = list(cfg.tfs)
        assert all(list(t) == sorted(t, key=order.index) for t in ours)


def test_parameters_uniform_on_lerobot_ranges() -> None:
    cfg = config()
    lerobot_tfs = ImageTransforms(cfg).transforms
    ranges = {
        "brightness": lerobot_tfs["brightness"].brightness,
        "contrast": lerobot_tfs["contrast"].contrast,
        "saturation": lerobot_tfs["saturation"].saturation,
        "hue": lerobot_tfs["hue"].hue,
        "sharpness": lerobot_tfs["sharpness"].sharpness,
        "angle": lerobot_tfs["affine"].degrees,
    }
    height, width = 96, 128
    drawn: dict[str, list[float]] = {name: [] for name in ranges}
    translations: dict[str, Counter] = {"tx": Counter(), "ty": Counter()}
    for plan in our_plans(cfg, height, width):
        for op in plan.ops:
            if isinstance(op, AffineOp):
                drawn["angle"].append(op.angle)
                translations["tx"][op.translate[0]] += 1
                translations["ty"][op.translate[1]] += 1
                assert op.scale == 1.0 and op.shear == (0.0, 0.0)
            else:
                drawn[op.kind].append(op.factor)
    for name, (lo, hi) in ranges.items():
        statistic, critical = ks_uniform(drawn[name], lo, hi)
        assert len(drawn[name]) > N_DRAWS // 3 and statistic < critical, name
    # round(uniform(-m, m)) with m = translate fraction * size: P(k) = |[k - 1/2, k + 1/2] & [-m, m]| / 2m
    for axis, fraction, size in (
        ("tx", lerobot_tfs["affine"].translate[0], width),
        ("ty", lerobot_tfs["affine"].translate[1], height),
    ):
        m = fraction * size
        pmf = {k: (min(k + 0.5, m) - max(k - 0.5, -m)) / (2 * m) for k in range(-math.ceil(m), math.ceil(m) + 1)}
        assert chi_square_fit_p(translations[axis], {k: p for k, p in pmf.items() if p > 0}) > ALPHA, axis


def test_color_jitter_order_is_a_uniform_permutation() -> None:
    cfg = config(("cj", "ColorJitter", {"brightness": 0.2, "contrast": 0.2, "saturation": 0.2, "hue": 0.05}))
    orders = Counter(tuple(op.kind for op in plan.ops) for plan in our_plans(cfg))
    assert len(orders) == 24
    assert chi_square_fit_p(orders, {order: 1 / 24 for order in orders}) > ALPHA


# --- configs refused -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tfs", "max_num", "match"),
    [
        ((("noise", "GaussianNoise", {}),), 3, r"'noise' \(type 'GaussianNoise'\).*supported: ColorJitter"),
        ((("b", "ColorJitter", {"brightness": (1.2, 0.8)}),), 3, "brightness"),
        ((("h", "ColorJitter", {"hue": 0.7}),), 3, "hue"),
        ((("c", "ColorJitter", {"contrast": -0.1}),), 3, "contrast"),
        ((("c", "ColorJitter", {"gamma": 0.1}),), 3, "'gamma'"),
        ((("s", "SharpnessJitter", {}),), 3, "'sharpness'"),
        ((("s", "SharpnessJitter", {"sharpness": (2.0, 1.0)}),), 3, "sharpness"),
        ((("a", "RandomAffine", {"translate": (0.1, 0.1)}),), 3, "'degrees'"),
        ((("a", "RandomAffine", {"degrees": 5, "translate": (1.5, 0.1)}),), 3, "translate"),
        ((("a", "RandomAffine", {"degrees": 5, "scale": (0.0, 1.0)}),), 3, "scale"),
        ((("a", "RandomAffine", {"degrees": 5, "shear": (1, 2, 3)}),), 3, "shear"),
        ((("a", "RandomAffine", {"degrees": 5, "interpolation": InterpolationMode.BILINEAR}),), 3, "interpolation"),
        ((("a", "RandomAffine", {"degrees": 5, "fill": 1}),), 3, "fill"),
        ((("a", "RandomAffine", {"degrees": 5, "center": (0, 0)}),), 3, "center"),
        ((("i", "Identity", {"p": 1}),), 3, "'p'"),
        ((), 0, "max_num_transforms"),
    ],
)
def test_bad_configs_refused(tfs: tuple, max_num: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BatchImageTransforms(config(*tfs, max_num=max_num), seed=0, camera_keys=["cam"])


def test_duck_typed_config_and_zero_weight_skipped() -> None:
    tf = SimpleNamespace(weight=1.0, type="ColorJitter", kwargs={"brightness": 0.5})
    ignored = SimpleNamespace(weight=0.0, type="GaussianNoise", kwargs={})  # never applied, so never checked
    cfg = SimpleNamespace(enable=True, max_num_transforms=2, random_order=False, tfs={"b": tf, "n": ignored})
    plans = BatchImageTransforms(cfg, seed=0, camera_keys=["cam"]).draw(make_batch([0, 1]), epoch=0)["cam"]
    assert [p.transforms for p in plans] == [("b",), ("b",)]
