import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tinymodel import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with a chat template, saved as a local model directory."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))
