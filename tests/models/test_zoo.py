"""The block split computes torchvision's forward pass."""

import pytest
import torch
import torchvision.models as tv
from interstice.models.zoo import build_blocks


@pytest.mark.parametrize(
    ("name", "reference", "blocks"),
    [("resnet18", tv.resnet18, 6), ("shufflenet", tv.shufflenet_v2_x1_0, 5)],
)
def test_blocks_equal_torchvision(name: str, reference, blocks: int) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    split = build_blocks(name).eval()
    torch.manual_seed(0)
    whole = reference(weights=None, num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    assert len(split) == blocks
    with torch.no_grad():
        assert torch.allclose(split(x), whole(x), atol=1e-5)


def test_unknown_model_names_the_choices() -> None:
    with pytest.raises(ValueError, match="model 'vgg19' is unknown; choose one of AlexNet"):
        build_blocks("vgg19")
