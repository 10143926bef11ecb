"""Models: the tutorials' small CIFAR-10 ConvNet, a tiny any-size net, torchvision architectures."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from paijob.runtime.recipes.data import DataError, require_torchvision

BUILTIN_ARCHS = ("convnet", "tinynet", "tinyresnet")


class ConvNet(nn.Module):
    """The tutorials' CIFAR-10 network (two conv layers, three linear layers), 32×32 input."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class TinyNet(nn.Module):
    """A small conv + BatchNorm net for any image size (tests, smoke runs without torchvision)."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


class _Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = mid * 4
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class TinyResNet(nn.Module):
    """ResNet-50's layout (7x7 stem, max-pool, 3-4-6-3 bottlenecks, Kaiming init) at a small width.

    Without torchvision, this is what reproduces ResNet-50's depth-dependent behaviour on a
    CPU (for instance how BatchNorm statistics compound through 53 layers in evaluation).
    """

    def __init__(self, num_classes: int = 10, width: int = 16, blocks: tuple[int, ...] = (3, 4, 6, 3)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        layers: list[nn.Module] = []
        cin = width
        for stage, count in enumerate(blocks):
            mid = width * 2**stage
            for index in range(count):
                layers.append(_Bottleneck(cin, mid, 2 if index == 0 and stage > 0 else 1))
                cin = mid * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_model(arch: str, num_classes: int, image_size: int) -> nn.Module:
    if arch == "convnet":
        if image_size != 32:
            raise DataError(f"--arch convnet expects 32x32 images, got {image_size}; use tinynet or a torchvision arch")
        return ConvNet(num_classes)
    if arch == "tinynet":
        return TinyNet(num_classes)
    if arch == "tinyresnet":
        return TinyResNet(num_classes)
    torchvision = require_torchvision(f"--arch {arch}")
    try:
        return torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
    except (ValueError, KeyError) as error:
        raise DataError(f"--arch {arch}: not a torchvision model name ({error})") from None
