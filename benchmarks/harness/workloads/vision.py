"""Vision inference (``vision_fwd``): torchvision's ResNet (v1.5: the stride in the 3x3
convolution) and VGG written out layer for layer (torchvision is not a dependency), and
``transformers.ViTForImageClassification`` for ``vit-base-patch16-224``; eval mode, so BatchNorm is
a separate op (the compiler folds it into the convolution).

The published harness (``archive/src/benchmark/pytorch/resnet_benchmark.py``, ``vgg_benchmark.py``,
``hf-google-vit_benchmark.py``) sends FP32 images ``[b, 3, 224, 224]`` (602 KB each) from the host
and gets FP32 logits ``[b, 1000]`` back, whatever ``--auto-cast`` did inside the graph.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from .base import HostTensor, Phase, UnbuildableRow, Workload, bare_name, dtype_of, hf_config, host_tensors, inference

# google/vit-base-patch16-224 (ImageNet-1k head)
VIT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                image_size=224, patch_size=16, num_channels=3, num_labels=1000)
VITS = ("vit-base-patch16-224", "vit-base-finetune")


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion = 4  # ResNet v1.5: the stride is in the 3x3 convolution

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, block: type, layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block: type, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


RESNETS = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet34": (BasicBlock, [3, 4, 6, 3]),
           "resnet50": (Bottleneck, [3, 4, 6, 3]), "resnet101": (Bottleneck, [3, 4, 23, 3]),
           "resnet152": (Bottleneck, [3, 8, 36, 3])}

VGG_CFGS = {  # torchvision cfgs "A", "B", "D", "E"
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


class VGG(nn.Module):
    def __init__(self, cfg: list, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(channels, v, 3, padding=1), nn.ReLU(inplace=True)]
                channels = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(0.5),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5),
            nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _name(arch: str) -> str:
    name = bare_name(arch)
    return name if name in VITS or name in RESNETS or name in VGG_CFGS else name.removeprefix("torchvision-")


@functools.lru_cache(maxsize=None)
def vision_model(arch: str, dtype: torch.dtype, training: bool = False) -> nn.Module:
    name = _name(arch)
    with torch.device("meta"):
        if name in RESNETS:
            model = ResNet(*RESNETS[name])
        elif name in VGG_CFGS:
            model = VGG(VGG_CFGS[name])
        elif name in VITS:
            from transformers import ViTForImageClassification

            model = ViTForImageClassification(hf_config("vit", VIT_BASE))
        else:
            raise UnbuildableRow(f"unknown vision model {arch!r}; known: "
                                 f"{', '.join([*RESNETS, *VGG_CFGS])}, vit-base-patch16-224")
    return model.to(dtype).train(training)


def build_vision_fwd(cfg: dict[str, Any], **_: Any) -> Workload:
    arch, batch, image = cfg["arch"], int(cfg["batch"]), int(cfg.get("image", 224))
    dtype = dtype_of(cfg)
    model = vision_model(arch, dtype)
    with torch.device("meta"):
        x = torch.zeros(batch, 3, image, image, dtype=dtype)
    if _name(arch) in VITS:
        fn = lambda: model(pixel_values=x).logits  # noqa: E731
    else:
        fn = lambda: model(x)  # noqa: E731
    unit = cfg.get("unit", "ms")
    return Workload("vision_fwd", [Phase("forward", inference(fn))], unit,
                    items=int(cfg.get("cores", 1)) * batch,
                    host_inputs=[HostTensor("pixel_values", (batch, 3, image, image), torch.float32)],
                    outputs=lambda result: host_tensors(result, dtype=torch.float32))


def family(arch: str) -> str | None:
    name = _name(arch)
    if name in RESNETS:
        return "resnet"
    if name in VGG_CFGS:
        return "vgg"
    return None


BUILDERS = {"vision_fwd": build_vision_fwd}
