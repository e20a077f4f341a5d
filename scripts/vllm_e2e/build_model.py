"""Build a random tiny Llama and a locally trained tokenizer (no download): build_model.py DIR.

hidden 64, intermediate 128, 2 layers, 2 heads, head_dim 32 (vLLM's CPU attention backend rejects
head sizes below 32), 512 positions, float32. ~650 KB, a few seconds. Idempotent: an existing
complete model dir is kept.
"""

import glob
import os
import shutil
import sys

VOCAB = 2000


def main() -> None:
    out = sys.argv[1]
    if os.path.exists(os.path.join(out, "config.json")) and os.path.exists(
        os.path.join(out, "tokenizer.json")
    ):
        print(f"model: reusing {out}")
        return
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    files = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
    if not files:
        sys.exit("no text under /usr/share/common-licenses to train the tokenizer on")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=fast.vocab_size if fast.vocab_size >= VOCAB else VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg).to(torch.float32)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    fast.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)  # an incomplete earlier attempt
    os.replace(tmp, out)
    print(f"model: built {out} (vocab {cfg.vocab_size})")


if __name__ == "__main__":
    main()
