"""Models: the tutorials' small CIFAR-10 ConvNet, a tiny any-size net, torchvision architectures."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from paijob.runtime.recipes.data import DataError, require_torchvision

BUILTIN_ARCHS = ("convnet", "tinynet")


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


def build_model(arch: str, num_classes: int, image_size: int) -> nn.Module:
    if arch == "convnet":
        if image_size != 32:
            raise DataError(f"--arch convnet expects 32x32 images, got {image_size}; use tinynet or a torchvision arch")
        return ConvNet(num_classes)
    if arch == "tinynet":
        return TinyNet(num_classes)
    torchvision = require_torchvision(f"--arch {arch}")
    try:
        return torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
    except (ValueError, KeyError) as error:
        raise DataError(f"--arch {arch}: not a torchvision model name ({error})") from None
