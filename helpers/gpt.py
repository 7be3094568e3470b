"""The small GPT of notebook 11 and the text it learns, character by character.

Introduced in notebook 11. The model is notebook 10's pre-norm block (causal self-attention,
then an MLP) stacked as GPT-2 stacks it: token and position embeddings, the blocks, a final
layer norm and a head that gives each next character's logits. Its parts are named as the
notebook splits them: each block's q, k, v and o projections and fc1, fc2 (tensor
parallelism), the blocks in a dict by their number (a pipeline stage keeps its own and
deletes the others, so every parameter keeps the name it has in the whole model).

The text is the description of every data set that scikit-learn ships (the .rst files of
sklearn/datasets/descr, BSD-3-Clause licence, as the package itself): about 300 kB of English,
installed with the course, nothing downloaded.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

TEXT_LICENCE = "BSD-3-Clause (scikit-learn)"


@dataclass(frozen=True)
class Config:
    """The model's sizes: characters, width, heads, blocks, and the length of a sequence."""

    vocab: int
    width: int = 32
    heads: int = 4
    layers: int = 4
    seq: int = 32


def text_files() -> list[str]:
    """scikit-learn's data set descriptions, in a fixed order."""
    import sklearn

    folder = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "descr")
    return sorted(glob.glob(os.path.join(folder, "*.rst")))


def corpus() -> tuple[torch.Tensor, list[str]]:
    """The whole text as character ids (int64), and the characters, sorted, that ids index."""
    text = "".join(open(f, encoding="utf-8").read() for f in text_files())
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text]), chars


class Block(nn.Module):
    """Pre-norm causal self-attention, then an MLP 4 times wider. The number of heads is
    taken from q's output width, so a block whose q holds a slice of the heads (tensor
    parallelism) attends with its own heads only."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.head_width = cfg.width // cfg.heads
        self.ln1, self.ln2 = nn.LayerNorm(cfg.width), nn.LayerNorm(cfg.width)
        self.q, self.k, self.v, self.o = (nn.Linear(cfg.width, cfg.width) for _ in range(4))
        self.fc1 = nn.Linear(cfg.width, 4 * cfg.width)
        self.fc2 = nn.Linear(4 * cfg.width, cfg.width)
        self.recompute = False  # activation checkpointing: keep the input, redo the rest

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            return checkpoint(self.body, x, use_reentrant=False)
        return self.body(x)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.ln1(x)
        q, k, v = (m(h).view(b, t, -1, self.head_width).transpose(1, 2)
                   for m in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    """Embeddings, the blocks by number, the final norm and the head. A pipeline stage sets
    the parts it does not hold to None (keep_stage): it then takes and gives activations."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.tok, self.pos = nn.Embedding(cfg.vocab, cfg.width), nn.Embedding(cfg.seq, cfg.width)
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.layers)})
        self.ln, self.head = nn.LayerNorm(cfg.width), nn.Linear(cfg.width, cfg.vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok is not None:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for layer in self.layers.values():
            x = layer(x)
        return self.head(self.ln(x)) if self.head is not None else x


def stage_layers(stage: int, stages: int, layers: int) -> range:
    """The blocks that pipeline stage `stage` of `stages` holds: an equal run of them."""
    if layers % stages:
        raise ValueError(f"{layers} blocks do not split into {stages} equal stages")
    per = layers // stages
    return range(stage * per, (stage + 1) * per)


def keep_stage(model: GPT, stage: int, stages: int) -> GPT:
    """The model cut down to one pipeline stage, in place: its blocks, the embeddings on the
    first stage, the norm and head on the last. Parameters keep their whole-model names."""
    mine = stage_layers(stage, stages, len(model.layers))
    for name in list(model.layers):
        if int(name) not in mine:
            del model.layers[name]
    if stage != 0:
        model.tok = model.pos = None
    if stage != stages - 1:
        model.ln = model.head = None
    return model


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the next character, averaged over every position of the batch."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def batch(data: torch.Tensor, step: int, rows: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s batch: `rows` windows of the text at places drawn from a generator seeded
    with the step (the same in every process), and the same windows one character on."""
    g = torch.Generator().manual_seed(step)
    starts = torch.randint(0, len(data) - seq - 1, (rows,), generator=g)
    return (torch.stack([data[s:s + seq] for s in starts]),
            torch.stack([data[s + 1:s + seq + 1] for s in starts]))
