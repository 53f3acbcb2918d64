"""Batched image kernels with one parameter per sample, matching torchvision's v2 functional kernels, in torch
operations (any device; cpu_kernels.py has the CPU versions of hue and affine's picks).

Every kernel takes float32 samples [N, T, C, H, W] in [0, 1] (T frames sharing the sample's parameter, C = 1 or 3)
and a float64 tensor [N] (or [N, 6] for `affine`) of per-sample parameters, and returns the adjusted samples (possibly
the input itself when the operation is the identity for that shape, e.g. saturation of a 1-channel image, as
torchvision does). Brightness, contrast and saturation follow torchvision 0.26's float formulas op for op (the same
bits on CPU); sharpness sums its 3x3 smoothing in another order, hue rebuilds the channels from max, chroma and
hue, affine picks grid_sample's pixels (measured figures: batch_transforms.py).
"""

from __future__ import annotations

import math

import torch

# ITU-R 601-2 luma weights, as torchvision's rgb_to_grayscale
_LUMA = (0.2989, 0.587, 0.114)


def _per_sample(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[N] float64 -> [N, 1, 1, 1, 1] in the images' dtype and device, rounded once like a Python-float scalar is."""
    return values.to(device=like.device, dtype=like.dtype).view(-1, 1, 1, 1, 1)


def _blend(image1: torch.Tensor, image2: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    # torchvision: image1.mul(ratio).add_(image2, alpha=1 - ratio); addcmul rounds like the alpha-add (checked bit for
    # bit in the tests), a separate multiply then add would not. 1 - ratio is taken in float64 as torchvision does.
    return torch.addcmul(image1 * _per_sample(ratio, image1), image2, _per_sample(1.0 - ratio, image1)).clamp_(0.0, 1.0)


def _grayscale(images: torch.Tensor) -> torch.Tensor:
    r, g, b = images.unbind(dim=-3)
    return r.mul(_LUMA[0]).add_(g, alpha=_LUMA[1]).add_(b, alpha=_LUMA[2]).unsqueeze(dim=-3)


def adjust_brightness(images: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """`F.adjust_brightness` per sample: images * factor, clamped to [0, 1]."""
    return images.mul(_per_sample(factors, images)).clamp_(0.0, 1.0)


def adjust_contrast(images: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """`F.adjust_contrast` per sample: blend each frame with the mean of its grayscale."""
    gray = _grayscale(images) if images.shape[-3] == 3 else images
    return _blend(images, gray.mean(dim=(-3, -2, -1), keepdim=True), factors)


def adjust_saturation(images: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """`F.adjust_saturation` per sample: blend with the grayscale image (1-channel images are returned as is)."""
    if images.shape[-3] == 1:
        return images
    return _blend(images, _grayscale(images), factors)


def adjust_hue(images: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """`F.adjust_hue` per sample; factors in turns, [-0.5, 0.5] (1-channel images are returned as is).

    A hue shift keeps each pixel's largest channel and chroma (max - min) and moves its hue H, taken in sixths of a
    turn from the sector of the largest channel (torchvision's rule, ties to red then green), shifted and wrapped to
    [0, 6). Each channel is rebuilt as max - chroma * w(H), with w = clamp(2 - |H - 3|, 0, 1) for red and
    clamp(|H - c| - 1, 0, 1) for green (c = 2) and blue (c = 4): the same function as torchvision's RGB -> HSV -> RGB
    round trip in a few passes over the pixels, equal to it within 2e-6 (float rounding, measured) and ~4x faster
    than kornia's RGB<->HSV on 128x128 frames.
    """
    if images.shape[-3] == 1:
        return images
    r, g, b = images.unbind(dim=-3)
    largest = torch.maximum(torch.maximum(r, g), b)
    chroma = largest - torch.minimum(torch.minimum(r, g), b)
    # grey pixels (chroma 0) have numerators 0: any hue, and chroma 0 rebuilds them
    divisor = chroma.clamp_min(torch.finfo(images.dtype).tiny)
    sixths = torch.where(
        largest == r,
        (g - b).div_(divisor),
        torch.where(largest == g, (b - r).div_(divisor).add_(2.0), (r - g).div_(divisor).add_(4.0)),
    )
    sixths = sixths.add_(_per_sample(factors * 6.0, images).squeeze(-3)).remainder_(6.0)
    out = torch.empty_like(images)
    for channel, centre in enumerate((3.0, 2.0, 4.0)):
        distance = (sixths - centre).abs_()
        weight = (distance.neg_().add_(2.0) if channel == 0 else distance.sub_(1.0)).clamp_(0.0, 1.0)
        torch.sub(largest, weight.mul_(chroma), out=out.select(-3, channel))
    return out


def adjust_sharpness(images: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """`F.adjust_sharpness` per sample: blend with a 3x3 smoothing, the 1-pixel border kept.

    The smoothing, 1/13 of each neighbour and 5/13 of the centre, is taken as 1/13 of the 3x3 box sum plus 4/13 of
    the centre, the box sum in two separable passes of 3-tap sums: ~3x faster than the depthwise convolution
    torchvision runs (oneDNN on CPU), within an ulp of it (float sums in another order). The blend is torchvision's,
    in its order (kornia.enhance.sharpness blends in another).
    """
    height, width = images.shape[-2:]
    if height <= 2 or width <= 2:
        return images
    planes = images.reshape(-1, height, width)
    rows = planes[:, :, :-2] + planes[:, :, 1:-1]
    rows += planes[:, :, 2:]
    box = rows[:, :-2] + rows[:, 1:-1]
    box += rows[:, 2:]
    blurred = box.mul_(1.0 / 13.0).add_(planes[:, 1:-1, 1:-1], alpha=4.0 / 13.0)
    output = images.clone()
    interior = output[..., 1:-1, 1:-1]
    interior.addcmul_(blurred.view(interior.shape).sub_(interior), _per_sample(1.0 - factors, images))
    return output.clamp_(0.0, 1.0)


def inverse_affine_matrix(
    *, angle: float, translate: tuple[int, int], scale: float, shear: tuple[float, float]
) -> list[float]:
    """The 2x3 output->input pixel map of torchvision's `F.affine` about the image centre, flattened row-major.

    Args:
        angle: rotation in degrees, counter-clockwise.
        translate: (tx, ty) in pixels.
        scale: isotropic scale.
        shear: (sx, sy) in degrees.
    """
    # torchvision's _get_inverse_affine_matrix with center (0, 0) (the tensor kernel's default), same operation order
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    tx, ty = float(translate[0]), float(translate[1])
    cos_sy = math.cos(sy)
    tan_sx = math.tan(sx)
    a = math.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot - sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    matrix = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    matrix[2] += 0.0 - matrix[0] * tx - matrix[1] * ty
    matrix[5] += 0.0 - matrix[3] * tx - matrix[4] * ty
    return matrix


def affine(images: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """`F.affine(..., interpolation=NEAREST, fill=0)` per sample, from [N, 6] `inverse_affine_matrix` rows; any dtype
    (nearest neighbour only picks pixels: on uint8 it gives the bytes the float kernel's picks would)."""
    height, width = images.shape[-2:]
    return pick_pixels(images, affine_sources(matrices, height=height, width=width, device=images.device))


def affine_sources(matrices: torch.Tensor, *, height: int, width: int, device: torch.device) -> torch.Tensor:
    """[N, H * W] int64: the pixel of the bordered input (`bordered_planes`: (y + 1) * (W + 2) + x + 1) each output
    pixel of sample n takes, a border pixel (0) where it takes the fill, from [N, 6] `inverse_affine_matrix` rows.

    torchvision's F.affine: a grid g = [x, y, 1] @ theta^T / [W / 2, H / 2] over pixel-centred coordinates (its
    _affine_grid, a float32 matrix product), then grid_sample's picks (nearest, zeros padding, align_corners=False):
    (g + 1) * size / 2 - 0.5 rounded half to even, out of range -> fill. Here each coordinate of g is the float32 x
    term plus the y term with one rounding, as a fused multiply-add would (the sum taken in float64, then rounded),
    plus the constant: two [W] and [H] vectors per sample and a few passes per pixel, ~3x faster than the [HW, 3]
    product (4.3 ms per 480x640 frame on CPU). Picks moved vs torchvision's: 1.6e-6 of the pixels, as with the
    product (measured on random rotations, translations, scales and shears).
    """
    theta = matrices.to(device=device, dtype=torch.float32).view(-1, 2, 3)
    n = theta.shape[0]
    rescaled = theta.div(torch.tensor([0.5 * width, 0.5 * height], device=device).view(1, 2, 1))  # [N, 2, 3]
    xs = torch.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, steps=width, device=device).view(1, 1, width)
    ys = torch.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, steps=height, device=device).view(1, height, 1)
    picks = []
    for axis, size in ((0, width), (1, height)):
        x_term = (xs * rescaled[:, axis, 0].view(n, 1, 1)).double()
        coordinate = torch.addcmul(x_term, ys.double(), rescaled[:, axis, 1].double().view(n, 1, 1)).float()
        coordinate = coordinate.add_(rescaled[:, axis, 2].view(n, 1, 1)).add_(1.0).mul_(size * 0.5).sub_(0.5)
        picks.append(coordinate.round_())
    # a pick out of range lands on the zero border: no masks
    column, row = picks[0].clamp_(-1.0, width), picks[1].clamp_(-1.0, height)
    sources = row.add_(1.0).mul_(width + 2).add_(column).add_(1.0).to(torch.int64)
    return sources.view(n, height * width)


def pick_pixels(images: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
    """A new tensor: images [N, T, C, H, W] with every output pixel taken from its bordered input pixel `sources`
    [N, H * W] (`affine_sources`)."""
    n, frames, channels, height, width = images.shape
    planes, count = frames * channels, height * width
    return torch.gather(bordered_planes(images), 2, sources.unsqueeze(1).expand(n, planes, count)).view(images.shape)


def bordered_planes(images: torch.Tensor) -> torch.Tensor:
    """images [N, T, C, H, W] as [N, T * C, (H + 2) * (W + 2)] planes with a border of zeros one pixel wide, so that a
    pick of the fill is a pick like any other."""
    n, frames, channels, height, width = images.shape
    bordered = images.new_zeros((n, frames * channels, height + 2, width + 2))
    bordered[..., 1:-1, 1:-1] = images.reshape(n, frames * channels, height, width)
    return bordered.view(n, frames * channels, (height + 2) * (width + 2))
