#!/usr/bin/env python3
"""Checks that wanda's saved copy of a vision-language fixture's language model is the text-only
checkpoint transformers expects: it loads as the family's class with no missing or unexpected
key, and copied back into the vision-language model it gives that model's logits exactly.

    for f in gemma3-vl mistral3-vl llava qwen2_5-vl qwen3-vl; do
      target/debug/wanda prune --model tests/fixtures/models/tiny-$f --method wanda --sparsity 0.5 \
        --calib-text words.txt --nsamples 4 --seqlen 32 --eval-text words.txt --eval-seqlen 32 \
        --windows 4 --save /tmp/saved-$f
    done
    ~/.cache/wanda-ab-venv/bin/python scripts/check-saved-vision-language.py /tmp/saved-

where words.txt is any text of the fixtures' words (`w1 w2 …`).
"""
import sys

import torch
import transformers

IDS = [1, 5, 9, 3, 31, 0, 17, 64, 95, 2, 40, 41, 7, 7, 80, 12]
CLASSES = [("gemma3-vl", transformers.Gemma3ForConditionalGeneration),
           ("mistral3-vl", transformers.Mistral3ForConditionalGeneration),
           ("llava", transformers.LlavaForConditionalGeneration),
           ("qwen2_5-vl", transformers.Qwen2_5_VLForConditionalGeneration),
           ("qwen3-vl", transformers.Qwen3VLForConditionalGeneration)]


def main():
    saved_prefix = sys.argv[1]
    for fixture, cls in CLASSES:
        text, info = transformers.AutoModelForCausalLM.from_pretrained(
            f"{saved_prefix}{fixture}", output_loading_info=True)
        vlm = cls.from_pretrained(f"tests/fixtures/models/tiny-{fixture}")
        weights = {k[len("model."):]: v for k, v in text.state_dict().items()
                   if k.startswith("model.")}
        vlm.model.language_model.load_state_dict(weights, strict=True)
        vlm.lm_head.weight.data.copy_(text.lm_head.weight.data)
        with torch.no_grad():
            a = text(torch.tensor([IDS])).logits[0]
            b = vlm(input_ids=torch.tensor([IDS])).logits[0]
        zeros = sum(int((p == 0).sum()) for n, p in text.named_parameters()
                    if n.endswith("proj.weight"))
        problems = {k: v for k, v in info.items() if v}
        print(f"{fixture}: {type(text).__name__}, loading problems {problems or 'none'}, "
              f"max |logit difference| {float((a - b).abs().max())}, {zeros} pruned weights")


if __name__ == "__main__":
    main()
