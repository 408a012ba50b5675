"""``analyze FILE.py:NAME`` (compile a step) and ``hlo FILE|DIR`` (optimized HLO text)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from hlo_roofline import api
from hlo_roofline.cli._common import (
    CONTEXT,
    PROGRESS_MIN_FILES,
    check_run,
    chip_option,
    compile_entry,
    cost_model_option,
    emit,
    format_option,
    input_errors,
    model_flops_option,
    no_cache_option,
    output_options,
    parsed_entry,
    pyproject_user_packages,
    regex_callback,
    target_option,
    top_option,
    trace_out_option,
    user_package_option,
)


@click.command(
    context_settings=CONTEXT, short_help="Compile a JAX step; print its per-op roofline."
)
@click.argument("entry", metavar="FILE.py:NAME")
@chip_option
@target_option
@cost_model_option
@output_options
@format_option("table", "csv", "json")
@top_option
@click.option(
    "--measure",
    is_flag=True,
    help="Also run the step under the profiler (locally) and join measured per-op times.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Profiled steps for --measure.",
)
@no_cache_option
@user_package_option
@model_flops_option
@trace_out_option
def analyze(
    entry,
    chip,
    target,
    cost_model,
    csv_path,
    json_path,
    logdir,
    run,
    plot_path,
    fmt,
    top,
    measure,
    steps,
    no_cache,
    user_packages,
    model_flops,
    trace_path,
):
    """Compile a JAX step and print its per-op roofline.

    NAME is a function of no arguments in FILE.py (or in an importable module:
    package.module:NAME) that returns (step, args) or (step, args, jit_kwargs); the step is compiled as
    hlo_roofline.analyze(step, *args, chip=..., target=..., jit_kwargs=jit_kwargs). Args may be
    jax.ShapeDtypeStruct: nothing is allocated or run. A step that needs a context (a mesh
    set with jax.set_mesh, Flax axis rules) is yielded from inside it:
    `with jax.set_mesh(mesh): yield step, args`. For an --xla_dump_to directory use `hlo`.

    \b
    Example:
      $ hlo-roofline analyze steps.py:matmul_step --chip v5e
      $ hlo-roofline analyze steps.py:matmul_step --target v5e:2x2 --json large.json --top 3
      $ hlo-roofline analyze steps.py:elementwise_step --chip v5e --format csv
      $ hlo-roofline analyze steps.py:matmul_step --chip v5e --trace-out step.trace.json
    """
    check_run(logdir, run)
    report = compile_entry(
        entry, chip, target, cost_model, steps if measure else 0, no_cache, user_packages
    )
    if model_flops is not None:
        report = report.with_model_flops(model_flops)
    name = parsed_entry(entry).name
    emit({name: report}, fmt, top, csv_path, json_path, logdir, run or name, plot_path, trace_path)


@click.command(
    "hlo", context_settings=CONTEXT, short_help="Analyze HLO text or an XLA dump directory."
)
@click.argument("path", type=click.Path(exists=True, path_type=Path), metavar="FILE|DIR")
@chip_option
@cost_model_option
@click.option("--module", "module_regex", callback=regex_callback, metavar="REGEX",
              help="With a dump directory: only modules whose file name matches.")  # fmt: skip
@output_options
@format_option("table", "csv", "json")
@top_option
@user_package_option
@model_flops_option
@trace_out_option
def hlo_command(path, chip, cost_model, module_regex, csv_path, json_path, logdir, run, plot_path,
                fmt, top, user_packages, model_flops, trace_path):  # fmt: skip
    """Analyze optimized HLO text, or every optimized module of an --xla_dump_to directory.

    With several modules, --csv/--json/--plot insert the module name before the suffix and
    --logdir writes one run per module under RUN/.

    \b
    Example:
      $ hlo-roofline hlo fixtures/mlp_bf16/tpu_v5e.hlo.txt --chip v5e --top 5
      $ hlo-roofline hlo fixtures/mlp_bf16/tpu_v5e.hlo.txt --chip v5e --json mlp.json
      $ hlo-roofline hlo fixtures/mlp_bf16/tpu_v5e.hlo.txt --chip v5e --trace-out mlp.trace.json
    """
    check_run(logdir, run)
    packages = (*pyproject_user_packages(path if path.is_dir() else path.parent), *user_packages)
    if not path.is_dir():
        with input_errors(str(path)):
            report = api.analyze_file(
                path, cost_model, chip, user_packages=packages, model_flops=model_flops
            )
        reports = {api.module_key(path): report}
    else:
        count = len(api.dump_files(path, module_regex))
        bar = (
            click.progressbar(length=count, label="analyzing", file=sys.stderr, show_pos=True)
            if count >= PROGRESS_MIN_FILES
            else None
        )
        current = {"file": ""}  # the module being analyzed: an error names it

        def before_each(file: Path) -> None:
            current["file"] = str(file)
            if bar is not None:
                bar.update(1)

        with bar or contextlib.nullcontext():
            try:
                reports = api.analyze_dump(
                    path, cost_model, chip, user_packages=packages, model_flops=model_flops,
                    module=module_regex, before_each=before_each,
                )  # fmt: skip
            except Exception:
                with input_errors(current["file"]):
                    raise
    emit(reports, fmt, top, csv_path, json_path, logdir, run or path.stem, plot_path, trace_path)
