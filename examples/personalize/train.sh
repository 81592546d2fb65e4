#!/bin/sh
# Personalise on the device with IREE's own iree-run-module, no Python: one process per
# optimizer step, the parameters and Adam's state handed from step to step as .npy files.
#
#   sh train.sh MODULE.vmfb DATA_DIR [STEPS]
#
# DATA_DIR holds what model.py wrote (x, labels and the base weights w1 b1 w2 b2, as .npy).
# The training state lives in DATA_DIR/state/; a later run resumes from it. Each step writes
# a new state/ beside the old one and swaps them, so a power loss leaves one whole state.
# IREE_RUN_MODULE names the tool (default: iree-run-module on PATH); to emulate an aarch64
# build: IREE_RUN_MODULE="qemu-aarch64 -L /usr/aarch64-linux-gnu .../iree-run-module".
set -eu
module=$1
dir=$2
steps=${3:-50}
run=${IREE_RUN_MODULE:-iree-run-module}
params="w1 b1 w2 b2"
# The state's layout, as `irgrad inspect MODULE.vmfb` prints it for --train adam.
state="step m_w1 m_b1 m_w2 m_b2 v_w1 v_b1 v_w2 v_b2"

files() {  # files FLAG DIR NAME...: --FLAG=@DIR/NAME.npy for each NAME
  flag=$1
  from=$2
  shift 2
  for name in "$@"; do printf ' --%s=@%s/%s.npy' "$flag" "$from" "$name"; done
}

call() {  # call FUNCTION FLAG...: run one function of the module on the user's samples
  function=$1
  shift
  $run --module="$module" --device=local-sync --function="$function" \
    --input=@"$dir/x.npy" --input=@"$dir/labels.npy" "$@"
}

if [ ! -d "$dir/state" ] && [ -d "$dir/state.old" ]; then
  mv "$dir/state.old" "$dir/state"  # the power went between the two moves of a swap
fi
if [ ! -d "$dir/state" ]; then
  rm -rf "$dir/state.next"
  mkdir "$dir/state.next"
  for p in $params; do cp "$dir/$p.npy" "$dir/state.next/"; done
  # shellcheck disable=SC2046  # the flags are meant to split into words
  call loss_train_init $(files input "$dir" $params) $(files output "$dir/state.next" $state) >/dev/null
  mv "$dir/state.next" "$dir/state"
fi

i=0
while [ "$i" -lt "$steps" ]; do
  rm -rf "$dir/state.next"
  mkdir "$dir/state.next"
  # shellcheck disable=SC2046
  loss=$(call loss_train_step $(files input "$dir/state" $params $state) \
         --output=- $(files output "$dir/state.next" $params $state) | sed -n 's/^f32=//p')
  rm -rf "$dir/state.old"
  mv "$dir/state" "$dir/state.old"
  mv "$dir/state.next" "$dir/state"
  echo "step $i: loss $loss"
  i=$((i + 1))
done
