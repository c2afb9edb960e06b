"""The block split computes torchvision's forward pass."""

import builtins
import subprocess
import sys

import pytest
import torch
from interstice.models.zoo import build_blocks


@pytest.mark.parametrize(
    ("name", "reference", "blocks"),
    [("resnet18", "resnet18", 6), ("shufflenet", "shufflenet_v2_x1_0", 5)],
)
def test_blocks_equal_torchvision(name: str, reference: str, blocks: int) -> None:
    tv = pytest.importorskip("torchvision.models", reason="needs the vision extra")
    torch.manual_seed(0)
    split = build_blocks(name).eval()
    torch.manual_seed(0)
    whole = getattr(tv, reference)(weights=None, num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    assert len(split) == blocks
    with torch.no_grad():
        assert torch.allclose(split(x), whole(x), atol=1e-5)


def test_unknown_model_names_the_choices() -> None:
    with pytest.raises(ValueError, match="model 'vgg19' is unknown; choose one of AlexNet"):
        build_blocks("vgg19")


def test_without_torchvision_tinycnn_builds_and_others_name_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_import = builtins.__import__

    def no_torchvision(name: str, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if name.split(".")[0] == "torchvision":
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torchvision)
    assert len(build_blocks("tinycnn")) == 4
    with pytest.raises(ValueError, match=r"pip install 'interstice\[vision\]'"):
        build_blocks("resnet18")


def test_interstice_models_imports_with_torch_alone() -> None:
    blocker = (
        "import sys, importlib.abc\n"
        "class NoTorchvision(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'torchvision':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, NoTorchvision())\n"
        "from interstice.models import MODEL_NAMES, Layout, build_trainer\n"
        "from interstice.models.zoo import build_blocks\n"
        "print(len(build_blocks('tinycnn')))\n"
    )
    result = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "4"
