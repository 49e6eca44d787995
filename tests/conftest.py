import sys
from pathlib import Path

# Test helpers (tests/tiny.py) import as plain modules.
sys.path.insert(0, str(Path(__file__).parent))

import torch

# Tiny models gain nothing from intra-op threads, and a busy 2-core CI machine loses a lot to oversubscription.
torch.set_num_threads(1)
