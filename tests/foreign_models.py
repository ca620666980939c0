"""Models, batches and losses nanlab does not ship: the tests reuse faults and diagnose on them."""

import torch


class TinyEncoderLM(torch.nn.Module):
    """A torch.nn.TransformerEncoder language model on float features + tokens."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 32)
        self.feat = torch.nn.Linear(1, 32)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(32, 16)

    def forward(self, x, tokens):
        return self.head(self.enc(self.emb(tokens) + self.feat(x)))


def lm_batches(step):
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(0, 16, (8, 12), generator=g)
    return {"x": tokens[..., None].float() / 16, "tokens": tokens, "y": (tokens + 1) % 16}


def lm_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"], batch["tokens"]).flatten(0, 1),
                                             batch["y"].flatten())


def classifier_loss(model, batch):
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)
