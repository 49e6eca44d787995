import torch

# Tiny models gain nothing from intra-op threads, and a busy 2-core CI machine loses a lot to oversubscription.
torch.set_num_threads(1)
