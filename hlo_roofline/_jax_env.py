"""Environment defaults that must be in place before JAX starts its backends.

Imported (for its side effect) first by the package itself, so ``import hlo_roofline`` before
JAX starts is enough. None of it is required: when the user started JAX first, ``targets`` registers
the CUDA plugin late, and libtpu builds compile-only topologies all the same; these defaults only keep
JAX and libtpu quiet and the CUDA plugin registered from the start. They matter only on machines
without the accelerator, and a variable the user set is never overridden:

- ``JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1``: without CUDA libraries the CUDA plugin fails its version
  check (JAX logs a traceback) and does not register. The variable skips only that check; a real
  GPU is still used.
- ``ALLOW_MULTIPLE_LIBTPU_LOAD=1`` (only where no TPU device exists): libtpu's machine-wide lock guards
  a real TPU; compile-only use never touches one, and the lock would stop two analyses (say,
  parallel test workers) from running at once.
- ``TPU_ACCELERATOR_TYPE`` / ``TPU_WORKER_HOSTNAMES`` (only where no TPU device exists): libtpu asks
  the cloud metadata server what this host is and, finding nothing, prints a page of errors on every
  start. A one-chip, local answer silences it; it describes only the (absent) local host, so the
  compile-only topology, which comes from the target, and the compiled programs are the same (checked
  for v5e, v5p, v6e and 7x targets).
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
if not Path("/dev/accel0").exists() and not Path("/dev/vfio").exists():
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
