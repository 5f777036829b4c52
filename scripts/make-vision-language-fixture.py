#!/usr/bin/env python3
"""Tiny random vision-language models, made and run by transformers, for the conformance tests
in tests/it/families.rs: the Rust side loads the folder's language model and must reproduce the
logits transformers gives for text alone.

    for f in gemma3-vl mistral3-vl llava qwen2_5-vl qwen3-vl qwen3-vl-moe llama4-vl; do
      ~/.cache/wanda-ab-venv/bin/python scripts/make-vision-language-fixture.py $f tests/fixtures/models/tiny-$f
    done

- gemma3-vl: Gemma3ForConditionalGeneration whose `text_config` is written as transformers 4
  wrote Gemma 3 4B's: only the keys that differ from Gemma3TextConfig's defaults, the legacy
  `rope_scaling` (linear ×8 on the global layers) and `sliding_window_pattern`; tied, no head.
- mistral3-vl: Mistral3ForConditionalGeneration with a head of its own and no
  `tie_word_embeddings` in the outer config (Mistral3Config's default says tied; the checkpoint's
  head wins, as in transformers 5).
- llava: LlavaForConditionalGeneration over a Llama whose `text_config` names only what differs
  from LlamaConfig's defaults, as llava-1.5's does.
- qwen2_5-vl: Qwen2_5_VLForConditionalGeneration with its config written as the hub's are, the
  language model's keys at the top level and multimodal RoPE as transformers 4's
  `rope_scaling: {"type": "mrope", "mrope_section": …}`; its tensors under `model.` itself.
- qwen3-vl: Qwen3VLForConditionalGeneration as transformers 5 writes it (`text_config` with
  interleaved multimodal RoPE in `rope_parameters`; tensors under `model.language_model.`).
- qwen3-vl-moe: Qwen3VLMoeForConditionalGeneration, its experts stacked in 3-D tensors as
  transformers 5 writes them.
- llama4-vl: Llama4ForConditionalGeneration over the family fixture's Llama 4 language model
  (`make-family-fixture.py llama4`), as transformers 5 writes it.

Each holds a vision tower and a projector, which the Rust side must neither read nor count.
The logits come from the folder reloaded by transformers, so they are what transformers makes of
the written config. Writes config.json, model.safetensors (f32), tokenizer.json and logits.json.
"""
import importlib.util
import json
import os
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("family", os.path.join(HERE, "make-family-fixture.py"))
family_fixture = importlib.util.module_from_spec(spec)
spec.loader.exec_module(family_fixture)
VOCAB, IDS = family_fixture.VOCAB, family_fixture.IDS

TEXT = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=112, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, initializer_range=0.25)


def build(kind):
    """The model, and the text_config to write in place of the one transformers 5 saves."""
    if kind == "gemma3-vl":
        text = transformers.Gemma3TextConfig(
            head_dim=32, query_pre_attn_scalar=24, sliding_window=6, pad_token_id=0,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}},
            tie_word_embeddings=True, **TEXT)
        vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32,
                                                 num_hidden_layers=1, num_attention_heads=2,
                                                 image_size=28, patch_size=14)
        config = transformers.Gemma3Config(text_config=text, vision_config=vision,
                                           mm_tokens_per_image=4, image_token_index=VOCAB - 1,
                                           boi_token_index=VOCAB - 3, eoi_token_index=VOCAB - 2)
        # Gemma 3 4B's text_config as the hub serves it: the keys that differ from the class's
        # defaults, RoPE in transformers 4's keys (the global base and the local one are the
        # defaults, so absent).
        sparse = {"model_type": "gemma3_text", "vocab_size": VOCAB, "hidden_size": 64,
                  "intermediate_size": 112, "num_hidden_layers": 3, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 32, "query_pre_attn_scalar": 24,
                  "max_position_embeddings": 128, "sliding_window": 6,
                  "sliding_window_pattern": 2, "initializer_range": 0.25,
                  "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}
        return transformers.Gemma3ForConditionalGeneration(config), sparse
    if kind == "mistral3-vl":
        text = transformers.MistralConfig(head_dim=16, sliding_window=None,
                                          tie_word_embeddings=False, **TEXT)
        vision = transformers.PixtralVisionConfig(hidden_size=16, intermediate_size=32,
                                                  num_hidden_layers=1, num_attention_heads=2,
                                                  image_size=28, patch_size=14)
        config = transformers.Mistral3Config(text_config=text, vision_config=vision,
                                             image_token_index=VOCAB - 1,
                                             tie_word_embeddings=False)
        return transformers.Mistral3ForConditionalGeneration(config), None
    if kind == "llava":
        text = transformers.LlamaConfig(tie_word_embeddings=False, **TEXT)
        vision = transformers.CLIPVisionConfig(hidden_size=16, intermediate_size=32,
                                               num_hidden_layers=1, num_attention_heads=2,
                                               image_size=28, patch_size=14, projection_dim=16)
        config = transformers.LlavaConfig(text_config=text, vision_config=vision,
                                          image_token_index=VOCAB - 1)
        sparse = {"model_type": "llama", "vocab_size": VOCAB, "hidden_size": 64,
                  "intermediate_size": 112, "num_hidden_layers": 3, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "max_position_embeddings": 128,
                  "initializer_range": 0.25}
        return transformers.LlavaForConditionalGeneration(config), sparse
    if kind == "qwen2_5-vl":
        text = dict(TEXT, head_dim=16, tie_word_embeddings=False, rope_parameters={
            "rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1_000_000.0})
        vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                      out_hidden_size=64, fullatt_block_indexes=[0], window_size=28,
                      patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
        config = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision,
                                               image_token_id=VOCAB - 1, video_token_id=VOCAB - 2,
                                               vision_start_token_id=VOCAB - 3,
                                               vision_end_token_id=VOCAB - 4,
                                               tie_word_embeddings=False)
        return transformers.Qwen2_5_VLForConditionalGeneration(config), "flat"
    if kind == "qwen3-vl":
        text = dict(TEXT, head_dim=16, tie_word_embeddings=False, rope_parameters={
            "rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True,
            "rope_theta": 5_000_000.0})
        vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                      out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                      temporal_patch_size=2, deepstack_visual_indexes=[0],
                      num_position_embeddings=16)
        config = transformers.Qwen3VLConfig(text_config=text, vision_config=vision,
                                            image_token_id=VOCAB - 1, video_token_id=VOCAB - 2,
                                            vision_start_token_id=VOCAB - 3,
                                            vision_end_token_id=VOCAB - 4,
                                            tie_word_embeddings=False)
        return transformers.Qwen3VLForConditionalGeneration(config), None
    if kind == "qwen3-vl-moe":
        # Qwen3-VL-MoE (Qwen3-VL-30B-A3B's layout) as transformers 5 writes it: Qwen3-MoE's
        # language model (three layers of four experts 48 wide, two a token, renormalised) with
        # its experts stacked (`mlp.experts.gate_up_proj` [experts, hidden, 2 x 48], gate first),
        # interleaved multimodal RoPE; tensors under `model.language_model.`.
        text = dict(TEXT, head_dim=16, tie_word_embeddings=False, moe_intermediate_size=48,
                    num_experts=4, num_experts_per_tok=2, rope_parameters={
                        "rope_type": "default", "mrope_section": [2, 3, 3],
                        "mrope_interleaved": True, "rope_theta": 5_000_000.0})
        vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                      out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                      temporal_patch_size=2, deepstack_visual_indexes=[0],
                      num_position_embeddings=16)
        config = transformers.Qwen3VLMoeConfig(text_config=text, vision_config=vision,
                                               image_token_id=VOCAB - 1, video_token_id=VOCAB - 2,
                                               vision_start_token_id=VOCAB - 3,
                                               vision_end_token_id=VOCAB - 4,
                                               tie_word_embeddings=False)
        return transformers.Qwen3VLMoeForConditionalGeneration(config), None
    if kind == "llama4-vl":
        # Llama 4 as the hub releases it: the family fixture's language model (chunks, NoPE,
        # unit-RMS q/k, query temperature, experts on every second layer; tensors under
        # `model.language_model.`, the head `lm_head`) beside a one-layer vision tower.
        text = family_fixture.config("llama4")
        vision = transformers.Llama4VisionConfig(
            hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            image_size=28, patch_size=14, vision_output_dim=32, projector_input_dim=32,
            projector_output_dim=32)
        config = transformers.Llama4Config(text_config=text, vision_config=vision,
                                           image_token_index=VOCAB - 1, boi_token_index=VOCAB - 2,
                                           eoi_token_index=VOCAB - 3)
        return transformers.Llama4ForConditionalGeneration(config), None
    raise SystemExit(f"unknown kind {kind}")


def text_logits(model):
    """The logits of IDS alone, `[len(IDS), vocab]`; for Llama 4 its language model's, which
    are the whole model's for text (its forward embeds the ids and calls that), since
    transformers 5.24 fails to build the whole model's output (`image_outputs` missing)."""
    if isinstance(model, transformers.Llama4ForConditionalGeneration):
        return model.language_model(input_ids=torch.tensor([IDS])).logits[0]
    return model(input_ids=torch.tensor([IDS])).logits[0]


def main():
    kind, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model, sparse = build(kind)
    model.eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "language_model" in name and name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
        before = text_logits(model)
    model.save_pretrained(out, safe_serialization=True)
    path = f"{out}/config.json"
    with open(path) as f:
        config = json.load(f)
    if sparse == "flat":
        # Qwen2.5-VL's hub config: the language model's keys at the top level, RoPE in
        # transformers 4's keys.
        text = config.pop("text_config")
        rope = text.pop("rope_parameters")
        for key in ("model_type", "architectures", "layer_types"):
            text.pop(key, None)
        config.update(text)
        config["rope_theta"] = rope["rope_theta"]
        config["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
    elif sparse is not None:
        config["text_config"] = sparse
    if kind == "mistral3-vl":
        # The outer default (tied) must lose to the checkpoint's own head.
        config.pop("tie_word_embeddings", None)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    with open(f"{out}/tokenizer.json", "w") as f:
        json.dump(family_fixture.tokenizer_json(), f)
    reloaded = type(model).from_pretrained(out).eval()
    with torch.no_grad():
        logits = text_logits(reloaded)
    print("the written config moves the logits by", float((logits - before).abs().max()))
    tied = reloaded.get_output_embeddings().weight.data_ptr() == reloaded.get_input_embeddings().weight.data_ptr()
    print("head tied:", tied)
    # named_parameters() lists a tied head once, under the embeddings.
    text_params = sum(p.numel() for n, p in reloaded.named_parameters()
                      if "language_model" in n or n.startswith("lm_head"))
    print("written config:", json.dumps({k: v for k, v in config.items() if k != "vision_config"}))
    with open(f"{out}/logits.json", "w") as f:
        json.dump({"ids": IDS, "logits": [[round(v, 7) for v in row] for row in logits.tolist()],
                   "text_parameters": text_params,
                   "transformers": transformers.__version__, "torch": torch.__version__}, f)
    print(out, "written; max |logit|", float(logits.abs().max()), "text parameters", text_params)


if __name__ == "__main__":
    main()
