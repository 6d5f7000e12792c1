"""One step of each kind of network the model zoo builds (model_zoo.py): the inputs a phase runs
on and the callable that runs it, for language models (prefill, decode against a static KV cache,
training), masked LMs, encoder-decoders, vision networks and the recommendation tower.

A builder takes (module, phase, sizes, device) and returns (the sizes it used, for the results
file; the workload's `make_step`). `transformers` is imported only by the steps that need it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kernel_select.errors import OptionError


#: A workload's `make_step`: the step through `fn` (the module itself or a compiled wrapper of it).
MakeStep = Callable[[Callable[..., Any]], Callable[[], Any]]


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Batch and sequence sizes of one architecture's phases."""

    prefill_batch: int
    prefill_seq: int  # tokens per sequence (language models); unused elsewhere
    decode_batch: int
    train_batch: int
    train_seq: int
    decoder_seq: int = 0  # decoder tokens per sequence (encoder-decoders); unused elsewhere


def transformers_module() -> Any:
    try:
        import transformers
    except ImportError:
        raise OptionError("compare-models: the transformers package is needed for this model "
                          "(pip install 'kernel_select[models]')") from None
    return transformers


def inference_steps(run: Callable[[Callable[..., Any]], Any]) -> MakeStep:
    """A workload's `make_step` for inference: `run(fn)` under torch.no_grad()."""
    import torch

    def make_step(fn: Callable[..., Any]) -> Callable[[], Any]:
        def step() -> Any:
            with torch.no_grad():
                return run(fn)

        return step

    return make_step


def training_steps(module: Any, loss_of: Callable[[Callable[..., Any]], Any]) -> MakeStep:
    """A workload's `make_step` for training: the loss `loss_of(fn)`, its backward, an AdamW step."""
    import torch

    # A tiny learning rate keeps random weights from diverging over hundreds of timed steps;
    # foreach=False keeps the optimizer's kernels the same whatever the compiled part does.
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-6, foreach=False)

    def make_step(fn: Callable[..., Any]) -> Callable[[], Any]:
        def step() -> Any:
            loss = loss_of(fn)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        return step

    return make_step


def lm_step(module: Any, phase: str, sizes: Sizes, device: Any) -> tuple[dict[str, int], Callable[..., Any]]:
    import torch

    vocab = module.config.vocab_size
    if phase == "train":
        ids = torch.randint(0, vocab, (sizes.train_batch, sizes.train_seq), device=device)
        return ({"batch": sizes.train_batch, "seq": sizes.train_seq},
                training_steps(module, lambda fn: fn(input_ids=ids, labels=ids).loss))
    if phase == "prefill":
        ids = torch.randint(0, vocab, (sizes.prefill_batch, sizes.prefill_seq), device=device)
        return ({"batch": sizes.prefill_batch, "seq": sizes.prefill_seq},
                inference_steps(lambda fn: fn(input_ids=ids, use_cache=False).logits))
    return decode_step(module, sizes, device)


def decode_step(module: Any, sizes: Sizes, device: Any) -> tuple[dict[str, int], Callable[..., Any]]:
    """One token per sequence after a prefill of `prefill_seq` tokens, into a static KV cache
    (fixed shapes, so the step compiles once and CUDA graphs can replay it)."""
    import torch

    t = transformers_module()
    batch, context = sizes.decode_batch, decode_context(module.config, sizes)
    cache = t.StaticCache(config=module.config, max_cache_len=context + 1)
    vocab = module.config.vocab_size
    prompt = torch.randint(0, vocab, (batch, context), device=device)
    token = torch.randint(0, vocab, (batch, 1), device=device)
    position = torch.tensor([context], device=device)
    with torch.no_grad():
        module(input_ids=prompt, past_key_values=cache, use_cache=True,
               cache_position=torch.arange(context, device=device))

    def run(fn: Callable[..., Any]) -> Any:
        _rewind(cache, context)
        return fn(input_ids=token, past_key_values=cache, use_cache=True, cache_position=position).logits

    return {"batch": batch, "context": context}, inference_steps(run)


def decode_context(config: Any, sizes: Sizes) -> int:
    """Tokens already in the cache when the timed token is decoded: the prefill length, but
    below the model's position limit (GPT-2 has 1024 learned positions; decoding at position
    1024 after a 1024-token prefill indexes past its embedding table)."""
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return min(sizes.prefill_seq, limit - 1) if limit else sizes.prefill_seq


def _rewind(cache: Any, length: int) -> None:
    """Make the cache hold `length` tokens again, so every timed step decodes the same position.
    transformers 5 keeps a per-layer length counter; 4.x writes where `cache_position` says."""
    for layer in getattr(cache, "layers", ()):
        counter = getattr(layer, "cumulative_length", None)
        if counter is not None and hasattr(counter, "fill_"):
            counter.fill_(length)


def mlm_step(module: Any, phase: str, sizes: Sizes,
              device: Any) -> tuple[dict[str, int], Callable[..., Any]]:
    """A masked LM's forward over B full sequences (no padding, so no attention mask is given)."""
    import torch

    ids = torch.randint(0, module.config.vocab_size, (sizes.prefill_batch, sizes.prefill_seq), device=device)
    return ({"batch": sizes.prefill_batch, "seq": sizes.prefill_seq},
            inference_steps(lambda fn: fn(input_ids=ids).logits))


def seq2seq_step(module: Any, phase: str, sizes: Sizes,
                  device: Any) -> tuple[dict[str, int], Callable[..., Any]]:
    """An encoder-decoder's forward as training runs it without the loss: B encoder sequences of S
    tokens, B decoder sequences of `decoder_seq` tokens (teacher forcing), logits for every
    decoder token."""
    import torch

    vocab = module.config.vocab_size
    source = torch.randint(0, vocab, (sizes.prefill_batch, sizes.prefill_seq), device=device)
    target = torch.randint(0, vocab, (sizes.prefill_batch, sizes.decoder_seq), device=device)
    return ({"batch": sizes.prefill_batch, "seq": sizes.prefill_seq, "decoder_seq": sizes.decoder_seq},
            inference_steps(lambda fn: fn(input_ids=source, decoder_input_ids=target,
                                          use_cache=False).logits))


def vision_step(module: Any, phase: str, sizes: Sizes,
                 device: Any) -> tuple[dict[str, int], Callable[..., Any]]:
    import torch

    batch = sizes.prefill_batch if phase == "prefill" else sizes.decode_batch
    side = module.config.image_size
    pixels = torch.randn(batch, 3, side, side, device=device, dtype=next(module.parameters()).dtype)
    return {"batch": batch, "image": side}, inference_steps(lambda fn: fn(pixel_values=pixels).logits)


def audio_step(module: Any, phase: str, sizes: Sizes,
               device: Any) -> tuple[dict[str, int], Callable[..., Any]]:
    """A speech encoder's forward over B clips of log-mel frames, as long as its positions allow (30 s
    for Whisper: 3,000 frames, 1,500 tokens after the convolutional stem)."""
    import torch

    config = module.config
    frames = 2 * config.max_source_positions  # the stem's second convolution halves the frames
    features = torch.randn(sizes.prefill_batch, config.num_mel_bins, frames, device=device,
                           dtype=next(module.parameters()).dtype)
    return ({"batch": sizes.prefill_batch, "frames": frames},
            inference_steps(lambda fn: fn(input_features=features).logits))


def recsys_step(module: Any, phase: str, sizes: Sizes,
                 device: Any) -> tuple[dict[str, int], Callable[..., Any]]:
    import torch

    batch = sizes.prefill_batch if phase == "prefill" else sizes.decode_batch
    dense = torch.randn(batch, module.sizes["dense"], device=device, dtype=next(module.parameters()).dtype)
    sparse = torch.randint(0, module.sizes["rows"], (batch, module.sizes["tables"]), device=device)
    return {"batch": batch}, inference_steps(lambda fn: fn(dense, sparse))


#: The step builder of each architecture kind (`model_zoo.Architecture.kind`).
STEP_BUILDERS = {"lm": lm_step, "mlm": mlm_step, "seq2seq": seq2seq_step, "vision": vision_step,
                 "audio": audio_step, "recsys": recsys_step}
