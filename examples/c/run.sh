#!/usr/bin/env bash
# From a clean clone to a C program computing a gradient and training on the device:
#
#   examples/c/run.sh [OUT_DIR]        (default build/c-example)
#
# builds IREE's runtime and irgrad's C library (c/build.sh, reused after the first time),
# compiles examples/mlp.py's loss with its gradient and with an Adam training step, writes the
# typed header, compiles examples/c/grad.c against it, and runs both examples. Needs irgrad
# (for `irgrad compile` / `irgrad header`), CMake >= 3.26 and a C compiler.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd -P)"
out="${1:-build/c-example}"
mkdir -p "$out" && cd "$out"
build="$("$repo/c/build.sh")"

irgrad compile "$repo/examples/mlp.py:loss" --grad --with-value -o mlp.vmfb
irgrad compile "$repo/examples/mlp.py:loss" --train adam --wrt w1,b1,w2,b2 -o mlp_adam.vmfb
irgrad header mlp.vmfb -o mlp.h --embed
# shellcheck disable=SC2046  # the flags file is a list of words
cc -Wall -Werror -O2 "$repo/examples/c/grad.c" -I. $(cat "$build/irgrad.flags") -o grad

# examples/mlp.py's inputs, and three batches of data, as raw float32.
python3 -c "
import sys; sys.path.insert(0, '$repo/examples')
import numpy as np
from mlp import example_inputs
args = example_inputs()
open('inputs.bin', 'wb').write(b''.join(a.tobytes() for a in args))
open('params.bin', 'wb').write(b''.join(a.tobytes() for a in args[2:]))
rng = np.random.default_rng(1)
xs = [rng.standard_normal((8, 4)).astype(np.float32) for _ in range(3)]
open('data.bin', 'wb').write(b''.join(x.tobytes() + np.sin(x.sum(1, keepdims=True)).astype(np.float32).tobytes() for x in xs))
"
./grad - inputs.bin gradients.bin
rm -f checkpoint.bin
"$build/examples/train" mlp_adam.vmfb params.bin data.bin checkpoint.bin 5 | tail -n 1
"$build/examples/train" mlp_adam.vmfb params.bin data.bin checkpoint.bin 10 --params-out trained.bin | tail -n 2
