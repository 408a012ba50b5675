"""``cost_model="xla"`` against the installed XLA's own HloCostAnalysis, on programs no fixture holds.

    .venv/bin/python benchmarks/heldout_parity.py                        # CPU, TPU v5e, H100
    .venv/bin/python benchmarks/heldout_parity.py --targets cpu sorts fft_ops
    .venv-oldest/bin/python benchmarks/heldout_parity.py --out /tmp/heldout   # the texts again
    .venv/bin/python benchmarks/heldout_parity.py --bands v5e:2x2,v5p:2x2x1,v6e:2x2,7x:2x2x1
    .venv/bin/python benchmarks/heldout_parity.py --mutations             # the verifier on them

The parity tests (``tests/test_xla_parity.py``) hold the base model to oracles committed with the
fixtures; this regenerates held-out cases: twenty small programs written for it (transposed, dilated
and depthwise convolutions, a max-pool's gradient, FFTs, sorts and top-k, segment sums, Cholesky
and a triangular solve, RNG, a KV-cache decode step, while and switch, int8 matmuls, batched
einsums, interior padding, an MLP and an attention training step, a scan, ``lax.map``) compiled
here for each target (compile-only for TPU and GPU), each module's totals from our ``xla`` model
set against ``hlo_module_cost_analysis`` of the same text by the installed jaxlib (as
``fixtures/generate.py`` makes the committed oracles; XLA's -1 per custom call taken out as the
parity tests take it out). The optimized texts are kept in ``--out``, so another environment
(the oldest jax) prices the same modules. Prints one line a module and a count; exits 1 where a
total differs (relative 1e-6).

With ``--bands`` (TPU targets) it also sets each op's expected time against XLA:TPU's own
``estimated_cycles`` in the same modules, as ``tests/tpu_oracle.py`` does for the committed
corpora: per chip, the share of XLA's time within 0.5-1.25x, above and below, and the share
where the bound is above XLA's estimate (docs/validation.md, "Programs outside the grammar").

With ``--mutations`` it also applies the shape verifier's mutations (``tests/test_shape_verifier.py``,
up to three of each kind a module) to every held-out text it has made: each one that breaks the
shapes must be an ``HloParseError`` on its own line, each one that keeps them priced as before.

The base model sizes shapes as the installed jaxlib's XLA does (``cost/xla_sizes.py``: tiled
arrays and tuples changed in 0.11.2); measured on 2026-12-07, all 60 totals equal XLA's under
jaxlib 0.10.2 and under 0.12.0.1.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

S = jax.ShapeDtypeStruct
f32, bf16, i32, i8 = jnp.float32, jnp.bfloat16, jnp.int32, jnp.int8
NHWC = ("NHWC", "HWIO", "NHWC")


def conv_transpose(x, w):
    return lax.conv_general_dilated(
        x, w, (1, 1), ((2, 2), (2, 2)), lhs_dilation=(2, 2), dimension_numbers=NHWC
    )


def depthwise_dilated(x, w):
    return lax.conv_general_dilated(
        x, w, (1, 1), "SAME", rhs_dilation=(2, 2), dimension_numbers=NHWC,
        feature_group_count=x.shape[-1],
    )  # fmt: skip


def pool_grad(x):
    def pooled(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME").sum()

    return jax.grad(pooled)(x)


def avgpool_cumsum(x):
    pooled = lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return jnp.cumsum(x, axis=1), pooled


def fft_ops(x):
    return jnp.fft.irfft(jnp.fft.rfft(x, axis=-1) * 2, axis=-1)


def sorts(x, keys):
    values, indices = lax.top_k(x, 7)
    return jnp.argsort(x, axis=-1), values, indices, jnp.sort(keys, axis=0)


def segment(x, ids):
    gathered = jnp.take_along_axis(x, ids[:, None] % 32, axis=1)
    return jax.ops.segment_sum(x, ids, num_segments=64), gathered


def linalg(a, b):
    factor = jnp.linalg.cholesky(a @ a.T + 64 * jnp.eye(a.shape[0]))
    return jax.scipy.linalg.solve_triangular(factor, b, lower=True)


def rng(key, x):
    drop, noise = jax.random.split(key)
    keep = jax.random.bernoulli(drop, 0.9, x.shape)
    return jnp.where(keep, x / 0.9, 0) + jax.random.normal(noise, x.shape)


def kv_decode(cache_k, cache_v, q, k, v, pos):
    cache_k = lax.dynamic_update_slice(cache_k, k, (0, pos, 0, 0))
    cache_v = lax.dynamic_update_slice(cache_v, v, (0, pos, 0, 0))
    scores = jnp.einsum("bhd,bthd->bht", q, cache_k) / 8.0
    scores = jnp.where((jnp.arange(cache_k.shape[1]) <= pos)[None, None], scores, -1e9)
    weights = jax.nn.softmax(scores.astype(f32), axis=-1).astype(q.dtype)
    return jnp.einsum("bht,bthd->bhd", weights, cache_v), cache_k, cache_v


def while_generate(w, h):
    def body(carry):
        i, h = carry
        return i + 1, jnp.tanh(h @ w)

    return lax.while_loop(lambda c: (c[0] < 5) & (c[1].sum() < 1e9), body, (0, h))[1]


def cond_branches(p, x, w):
    return lax.switch(p, [lambda x: x @ w, jnp.exp, lambda x: (x @ w) @ w], x)


def int8_mm(a, b, scale):
    return (lax.dot(a, b, preferred_element_type=i32).astype(f32) * scale).astype(bf16)


def batched_einsum(a, b):
    grouped = jnp.einsum("gij,gjk->gik", a[0], b[0].transpose(0, 2, 1))
    return jnp.einsum("bhqd,bhkd->bhqk", a, b), grouped


def pad_interior(x):
    return lax.pad(x, 0.0, ((1, -1, 1), (2, 3, 0))), jnp.flip(x, 0), jnp.roll(x, 3, 1)


def mlp_train(params, x, y):
    def loss(p):
        h = jax.nn.gelu(x @ p["w1"] + p["b1"])
        h = (h - h.mean(-1, keepdims=True)) * lax.rsqrt(h.var(-1, keepdims=True) + 1e-5)
        return jnp.mean((h @ p["w2"] - y) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)


def scan_rnn(w, u, xs):
    def step(h, x):
        h = jnp.tanh(h @ w + x @ u)
        return h, h.sum(-1)

    return lax.scan(step, jnp.zeros((xs.shape[1], w.shape[0]), xs.dtype), xs)


def reduce_precision_mix(x):
    y = lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10)
    return jnp.max(y, axis=0), jnp.argmax(x, axis=1), jnp.logaddexp(x, y).sum()


def map_loop(x):
    return lax.map(lambda row: jnp.sort(row) @ jnp.ones((row.shape[0],), row.dtype), x)


def attention_train(p, x):
    def loss(p):
        q, k, v = (jnp.einsum("btd,dhk->bthk", x, p[n]) for n in "qkv")
        t = x.shape[1]
        scores = jnp.einsum("bthk,bshk->bhts", q, k) / 8
        scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -1e9)
        out = jnp.einsum("bhts,bshk->bthk", jax.nn.softmax(scores, -1), v)
        return (out**2).mean()

    return jax.grad(loss)(p)


PROGRAMS = {
    "conv_transpose": (conv_transpose, (S((4, 16, 16, 32), bf16), S((3, 3, 32, 64), bf16))),
    "depthwise_dilated": (depthwise_dilated, (S((2, 32, 32, 48), f32), S((3, 3, 1, 48), f32))),
    "pool_grad": (pool_grad, (S((4, 32, 32, 16), f32),)),
    "avgpool_cumsum": (avgpool_cumsum, (S((4, 64, 64, 8), f32),)),
    "fft_ops": (fft_ops, (S((16, 512), f32),)),
    "sorts": (sorts, (S((64, 300), f32), S((1000, 3), i32))),
    "segment": (segment, (S((4096, 32), f32), S((4096,), i32))),
    "linalg": (linalg, (S((128, 128), f32), S((128, 16), f32))),
    "rng": (rng, (S((2,), jnp.uint32), S((256, 512), f32))),
    "kv_decode": (kv_decode, (
        S((4, 1024, 8, 64), bf16), S((4, 1024, 8, 64), bf16), S((4, 8, 64), bf16),
        S((4, 1, 8, 64), bf16), S((4, 1, 8, 64), bf16), S((), i32),
    )),
    "while_generate": (while_generate, (S((256, 256), f32), S((8, 256), f32))),
    "cond_branches": (cond_branches, (S((), i32), S((64, 128), f32), S((128, 128), f32))),
    "int8_mm": (int8_mm, (S((256, 512), i8), S((512, 384), i8), S((384,), f32))),
    "batched_einsum": (batched_einsum, (S((2, 4, 128, 64), bf16), S((2, 4, 96, 64), bf16))),
    "pad_interior": (pad_interior, (S((33, 17), f32),)),
    "mlp_train": (mlp_train, (
        {"w1": S((512, 1024), f32), "b1": S((1024,), f32), "w2": S((1024, 256), f32)},
        S((64, 512), f32), S((64, 256), f32),
    )),
    "scan_rnn": (scan_rnn, (S((128, 128), f32), S((64, 128), f32), S((12, 16, 64), f32))),
    "reduce_precision_mix": (reduce_precision_mix, (S((96, 200), f32),)),
    "map_loop": (map_loop, (S((6, 50), f32),)),
    "attention_train": (attention_train, (
        {n: S((256, 4, 64), bf16) for n in "qkv"}, S((2, 128, 256), bf16),
    )),
}  # fmt: skip
TOTALS = (("flops", "flops"), ("transcendentals", "transcendentals"),
          ("bytes accessed", "bytes_accessed"))  # fmt: skip


def optimized_text(fn, args, target: str) -> str:
    """``fn`` compiled for ``target`` ("cpu": here; else compile-only), as the analysis reads it."""
    from hlo_roofline import cache, targets
    from hlo_roofline.placement import place_args

    resolved = None if target == "cpu" else targets.parse_target(target)
    lowered = jax.jit(fn).lower(*place_args(args, resolved))
    return cache.compile_program(lowered, resolved, cache=False).text


def held_out_text(out: Path, name: str, target: str) -> Path:
    """The file of program ``name`` compiled for ``target`` in ``out``, compiled where missing."""
    path = out / f"{name}.{target.replace(':', '_')}.hlo.txt"
    if not path.exists():
        fn, args = PROGRAMS[name]
        path.write_text(optimized_text(fn, args, target))
    return path


def xla_totals(text: str) -> dict[str, float]:
    """The installed XLA's HloCostAnalysis of ``text`` (the committed oracles' way)."""
    from jaxlib import _hlo, _jax

    client = jax.devices("cpu")[0].client
    return _jax.hlo_module_cost_analysis(client, _hlo.hlo_module_from_text(text))


def differences(text: str) -> list[str]:
    """Where our ``xla`` model's module totals differ from XLA's on ``text``."""
    from test_xla_parity import _xla_minus_ones

    from hlo_roofline import analyze_hlo
    from hlo_roofline.hlo import parse

    module = parse(text)
    report = analyze_hlo(module, cost_model="xla")
    minus_flops, minus_bytes = _xla_minus_ones(module, report)
    theirs = xla_totals(text)
    adjust = {"flops": minus_flops, "bytes accessed": minus_bytes}
    found = []
    for xla_key, our_key in TOTALS:
        want, got = theirs.get(xla_key, 0.0) + adjust.get(xla_key, 0), report.summary[our_key]
        if abs(got - want) > 1e-6 * max(abs(want), 1.0):
            found.append(f"{our_key}: XLA {want:.7g}, ours {got:.7g}")
    return found


def bands(paths: list[Path], chip: str) -> dict[str, float]:
    """Of XLA:TPU's estimated time over the ops of ``paths`` (one chip's modules): the shares the
    expected time puts within the band, above and below it (``tpu_oracle.band_shares``), and the
    share where the bound is above XLA's estimate."""
    import pandas as pd
    from tpu_oracle import band_shares, priced_ops

    ops = pd.concat([priced_ops(path.read_text(), chip) for path in paths])
    shares = band_shares(ops)
    estimated = ops[ops["xla_estimate_s"].notna()]
    above = estimated["t_bound_s"] > estimated["xla_estimate_s"]
    weight = estimated["xla_estimate_s"]
    return {**shares, "bound_above": float(weight[above].sum() / weight.sum())}


def verifier_mutations(paths: list[Path]) -> dict[str, int]:
    """The shape verifier's mutations of ``paths``: how many break the shapes and how many of those
    parse or are refused on another line; how many keep them and how many are priced otherwise."""
    import test_shape_verifier as verifier

    from hlo_roofline import analyze_hlo
    from hlo_roofline.hlo import HloParseError, parse_module

    verifier.PER_KIND_PER_FILE = 3
    texts = {path.name: path.read_text() for path in paths}
    broken = verifier._mutations(texts, verifier._broken)
    escaped = 0
    for _, _, number, mutated in broken:
        try:
            parse_module(mutated)
        except HloParseError as exc:
            escaped += exc.line != number
            continue
        escaped += 1
    kept = verifier._mutations(texts, verifier._kept)
    before = {name: analyze_hlo(text).summary for name, text in texts.items()}
    totals = ("flops", "bytes_accessed", "transcendentals")
    moved = sum(
        any(analyze_hlo(mutated).summary[k] != before[name][k] for k in totals)
        for name, _, _, mutated in kept
    )
    kinds = len({kind for _, kind, _, _ in broken})
    return {"broken": len(broken), "kinds": kinds, "escaped": escaped, "kept": len(kept),
            "moved": moved}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("programs", nargs="*", help=f"a subset of {', '.join(PROGRAMS)}")
    parser.add_argument("--targets", default="cpu,v5e:2x2,h100",
                        help="comma-separated (XLA's parser aborts on some v5p/v6e/7x ones)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("/tmp/hlo_roofline_heldout"),
                        help="the optimized texts, kept (made again only where missing)")  # fmt: skip
    parser.add_argument("--bands", metavar="TARGETS",
                        help="TPU targets (comma-separated, e.g. v5e:2x2,7x:2x2x1) whose ops' expected "
                        "time is set against XLA:TPU's estimate (no parity: XLA's parser aborts on "
                        "some TPU7x modules)")  # fmt: skip
    parser.add_argument("--mutations", action="store_true",
                        help="also the shape verifier's mutations of every held-out text made")  # fmt: skip
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    import jaxlib

    args.out.mkdir(parents=True, exist_ok=True)
    names = args.programs or list(PROGRAMS)
    differing = 0
    print(f"jaxlib {jaxlib.__version__}: ours (cost_model='xla') vs XLA's HloCostAnalysis")
    for name in names:
        for target in args.targets.split(","):
            path = held_out_text(args.out, name, target)
            found = differences(path.read_text())
            differing += bool(found)
            print(f"  {'DIFFERS' if found else 'same   '} {path.name:44} {'; '.join(found)}")
    print(f"{differing} of {len(names) * len(args.targets.split(','))} modules differ")
    if args.bands:
        from hlo_roofline import targets

        print("expected ÷ XLA:TPU's estimated_cycles, shares of XLA's time (band 0.5-1.25x):")
        for target in args.bands.split(","):
            paths = [held_out_text(args.out, name, target) for name in names]
            chip = targets.parse_target(target).chip
            share = bands(paths, chip)
            print(f"  {chip:4} within {share['within']:.1%}, above {share['above']:.1%}, below "
                  f"{share['below']:.1%}; bound above XLA's {share['bound_above']:.2%}")  # fmt: skip
    if args.mutations:
        found = verifier_mutations(sorted(args.out.glob("*.hlo.txt")))
        print(f"shape verifier: {found['broken']} shape-breaking mutations of {found['kinds']} "
              f"kinds, {found['escaped']} parsed or refused on another line; {found['kept']} "
              f"consistent ones, {found['moved']} priced otherwise")  # fmt: skip
        differing += found["escaped"] + found["moved"]
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
