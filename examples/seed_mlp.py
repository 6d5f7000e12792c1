"""The seed MLP (nn.Linear 3420 -> 1280, bf16, dynamic sequence length) under torch.compile
max-autotune, with kernel_select choosing which Triton GEMM configs Inductor benchmarks.

    python examples/seed_mlp.py                       # install(gemm_topk=4, kernel_lut_path=...)
    python examples/seed_mlp.py --route options       # the same through torch.compile(options=...)
    python examples/seed_mlp.py --topk 8 --lut luts/h100_seed.json

One training step per sequence length (560, 1024, 2048). The sequence dimension is marked
dynamic, so Inductor compiles (and autotunes the forward GEMM and both backward GEMMs) once, at
the first length, and reuses the kernels for the others. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

SEQ_LENS = (560, 1024, 2048)
IN_FEATURES, OUT_FEATURES = 3420, 1280


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topk", default="4",
                        help="Triton configs to benchmark per GEMM (default: %(default)s)")
    parser.add_argument("--lut", default="luts/h100_seed.json",
                        help="kernel lookup table, used if the file exists (default: %(default)s)")
    parser.add_argument("--route", choices=("install", "options"), default="install",
                        help="set the knobs with install(...) or with torch.compile(options=...)")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("seed_mlp.py: this example needs a CUDA GPU (torch.cuda.is_available() is False); "
              "max-autotune only tunes Triton GEMMs on CUDA devices.", file=sys.stderr)
        return 1

    import kernel_select.inductor as ks_inductor

    # Show the handler's one-line decision per GEMM ("benchmarking 4 of 1400 Triton configs").
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("kernel_select.inductor").setLevel(logging.INFO)

    lut = args.lut if Path(args.lut).is_file() else None
    if lut is None:
        print(f"note: {args.lut} not found; ranking with the model alone")

    model = torch.nn.Linear(IN_FEATURES, OUT_FEATURES, device="cuda", dtype=torch.bfloat16)
    if args.route == "install":
        handler = ks_inductor.install(gemm_topk=args.topk, kernel_lut_path=lut)
        compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
    else:
        handler = ks_inductor.install()  # also registers the gemm_topk / kernel_lut_path options
        options = ks_inductor.max_autotune_options(gemm_topk=args.topk)
        if lut is not None:
            options["kernel_lut_path"] = lut
        compiled = torch.compile(model, options=options)

    try:
        for seq_len in SEQ_LENS:
            x = torch.randn(seq_len, IN_FEATURES, device="cuda", dtype=torch.bfloat16)
            torch._dynamo.mark_dynamic(x, 0)
            start = time.perf_counter()
            out = compiled(x)
            out.float().square().mean().backward()
            torch.cuda.synchronize()
            print(f"seq_len {seq_len:5d}: first step {time.perf_counter() - start:7.2f} s")
            torch.testing.assert_close(out, model(x), rtol=2e-2, atol=2e-1)
    finally:
        ks_inductor.uninstall()

    print("\nTriton configs benchmarked per GEMM (LUT entries first):")
    for selection in handler.selections:
        configs = ", ".join(f"{c.short()}{' [lut]' if s == 'lut' else ''}"
                            for c, s in zip(selection.configs, selection.sources))
        print(f"  {selection.problem}: {configs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
