"""The models of the scalability table, each split into a sequence of blocks.

SPB (``interstice.models.spb``) needs a model as an ordered sequence of B blocks, lowest
(input side) first, so that "the lowest d blocks" has a meaning; SplitBrain
(``interstice.models.splitbrain``) needs to find a VGG-style classifier of three
fully-connected layers. Every model here is therefore an ``nn.Sequential`` of blocks:
``blocks[0]`` is the stem, then the stages, and ``blocks[-1]`` the head (pooling, flatten,
classifier). The forward pass is the torchvision model's forward pass, regrouped.

Models are built with ``weights=None``: nothing is downloaded. ``tinycnn`` is a small VGG-style
CNN (three conv blocks, a three-layer classifier) fast enough for CPU end-to-end tests; it is
also the model SplitBrain is tested on. It needs torch alone; the other models need
torchvision (the ``vision`` extra), imported when one of them is built.

Legend for tensor names: B batch, C channels, H height, W width.
"""

from types import ModuleType

import torch
from torch import nn

MODEL_NAMES: tuple[str, ...] = (
    "AlexNet",
    "DenseNet",
    "mnasnet1",
    "mobilenet",
    "resnet18",
    "shufflenet",
    "vgg16",
    "tinycnn",
)

# AlexNet's three stride-2 max pools after an 11x11 stride-4 stem need at least 63 pixels.
_MIN_IMAGE_SIZE = {"AlexNet": 63}
_DEFAULT_MIN_IMAGE_SIZE = 8


class GlobalMean(nn.Module):
    """Mean over the spatial dimensions: ``x_BCHW -> x_BC`` (mnasnet's and shufflenet's head)."""

    def forward(self, x_BCHW: torch.Tensor) -> torch.Tensor:
        return x_BCHW.mean(dim=(2, 3))


def min_image_size(model: str) -> int:
    """Smallest square input side, in pixels, that ``model``'s forward pass accepts."""
    return _MIN_IMAGE_SIZE.get(model, _DEFAULT_MIN_IMAGE_SIZE)


def tinycnn(num_classes: int = 10, in_channels: int = 3) -> nn.Sequential:
    """A small VGG-style CNN of 4 blocks: three conv blocks and a 3-layer classifier head.

    Accepts any input of side >= 2 (an adaptive pool fixes the classifier's input at 64x2x2).
    """
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()),
        nn.Sequential(
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2)
        ),
        nn.Sequential(
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(2)
        ),
        nn.Sequential(
            nn.Flatten(),
            nn.Sequential(
                nn.Linear(256, 128),
                nn.ReLU(),
                nn.Linear(128, 128),
                nn.ReLU(),
                nn.Linear(128, num_classes),
            ),
        ),
    )


def _torchvision_models() -> ModuleType:
    """``torchvision.models``, or a ``ValueError`` saying how to install it."""
    try:
        import torchvision.models
    except ImportError as exc:
        raise ValueError(
            "the ImageNet models need torchvision: pip install 'interstice[vision]' "
            "(tinycnn needs torch alone)"
        ) from exc
    return torchvision.models


def _vgg_like(net: nn.Module, cuts: list[int]) -> list[nn.Module]:
    """AlexNet/VGG: ``features`` cut before the given indices, then avgpool + classifier."""
    bounds = [0, *cuts, len(net.features)]
    stages = [net.features[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    return [*stages, nn.Sequential(net.avgpool, nn.Flatten(), net.classifier)]


def _resnet18(tv: ModuleType, num_classes: int) -> list[nn.Module]:
    net = tv.resnet18(weights=None, num_classes=num_classes)
    stem = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)
    head = nn.Sequential(net.avgpool, nn.Flatten(), net.fc)
    return [stem, net.layer1, net.layer2, net.layer3, net.layer4, head]


def _densenet121(tv: ModuleType, num_classes: int) -> list[nn.Module]:
    net = tv.densenet121(weights=None, num_classes=num_classes)
    f = net.features
    return [
        nn.Sequential(f.conv0, f.norm0, f.relu0, f.pool0),
        nn.Sequential(f.denseblock1, f.transition1),
        nn.Sequential(f.denseblock2, f.transition2),
        nn.Sequential(f.denseblock3, f.transition3),
        nn.Sequential(f.denseblock4, f.norm5),
        # torchvision's DenseNet.forward applies relu and pooling functionally.
        nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), net.classifier),
    ]


def _mnasnet1(tv: ModuleType, num_classes: int) -> list[nn.Module]:
    net = tv.mnasnet1_0(weights=None, num_classes=num_classes)
    layers = net.layers
    # layers[0:8] is the stem, layers[8..13] the six inverted-residual stacks, 14..16 the 1x1 conv.
    stacks = [layers[i] for i in range(8, 14)]
    head = nn.Sequential(layers[14:], GlobalMean(), net.classifier)
    return [layers[:8], *stacks, head]


def _mobilenet(tv: ModuleType, num_classes: int) -> list[nn.Module]:
    net = tv.mobilenet_v2(weights=None, num_classes=num_classes)
    f = net.features
    # Stages of equal resolution and width (MobileNetV2 paper, table 2).
    bounds = [0, 2, 4, 7, 11, 14, 17, 19]
    stages = [f[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    return [*stages, nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), net.classifier)]


def _shufflenet(tv: ModuleType, num_classes: int) -> list[nn.Module]:
    net = tv.shufflenet_v2_x1_0(weights=None, num_classes=num_classes)
    head = nn.Sequential(net.conv5, GlobalMean(), net.fc)
    return [nn.Sequential(net.conv1, net.maxpool), net.stage2, net.stage3, net.stage4, head]


def build_blocks(model: str, num_classes: int = 10, in_channels: int = 3) -> nn.Sequential:
    """Build ``model`` with fresh weights as an ``nn.Sequential`` of blocks, stem first.

    Args:
        model: one of ``MODEL_NAMES``.
        num_classes: classifier outputs.
        in_channels: input channels; only ``tinycnn`` accepts other than 3.

    Returns:
        The model; ``len(result)`` is its block count B. Input ``x_BCHW``, output logits
        ``[B, num_classes]``.

    Raises:
        ValueError: unknown ``model``, ``in_channels`` != 3 for a torchvision model, or
            torchvision not installed (the message names ``pip install 'interstice[vision]'``).
    """
    if model not in MODEL_NAMES:
        raise ValueError(f"model {model!r} is unknown; choose one of {', '.join(MODEL_NAMES)}")
    if model == "tinycnn":
        return tinycnn(num_classes, in_channels)
    if in_channels != 3:
        raise ValueError(f"in_channels {in_channels}: model {model!r} takes 3-channel input")
    tv = _torchvision_models()
    builders = {
        "AlexNet": lambda: _vgg_like(tv.alexnet(weights=None, num_classes=num_classes), [3, 6]),
        "vgg16": lambda: _vgg_like(
            tv.vgg16(weights=None, num_classes=num_classes), [5, 10, 17, 24]
        ),
        "resnet18": lambda: _resnet18(tv, num_classes),
        "DenseNet": lambda: _densenet121(tv, num_classes),
        "mnasnet1": lambda: _mnasnet1(tv, num_classes),
        "mobilenet": lambda: _mobilenet(tv, num_classes),
        "shufflenet": lambda: _shufflenet(tv, num_classes),
    }
    return nn.Sequential(*builders[model]())
