"""Run the shared case table in real TensorFlow and store its numbers for irgrad's tests.

TensorFlow is a DEV-ONLY dependency: irgrad and its tests never import it. The
files this script writes are committed, so ``tests/test_tf_references.py`` needs
only numpy and irgrad.

Set-up (once) and regeneration, from the repository root:

    python3 -m venv /work/tfvenv && /work/tfvenv/bin/pip install tensorflow-cpu numpy
    /work/tfvenv/bin/python dev/make_tf_references.py

The programs live in ``tests/fixtures/tf/cases.py`` (numpy only): each is
``fn(T, *args, **variables)`` written against a namespace ``T``. Here ``T`` is a
thin shim over ``tensorflow`` and every program runs inside
``tf.function(autograph=False)``, i.e. with TensorFlow's graph semantics
(``tf.gradients``, ``tf.hessians`` and gradient_override_map need a graph).

Outputs:

* ``tests/fixtures/tf/references.npz``: ``<case>__arg<i>`` (the inputs) and
  ``<case>__out<j>`` (TensorFlow's outputs, flattened; ``IndexedSlices`` made dense);
* ``tests/fixtures/tf/references.json``: per case its group, description, program
  source, argument specs, the output structure (``tree``: leaf index / null for
  None / list / dict), the output dtypes and shapes, or the exception TensorFlow
  raised (``error``: class, its nearest builtin base class, message).
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.ops import gradients_impl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "tf")


def load_cases():
    spec = importlib.util.spec_from_file_location("tf_cases", os.path.join(OUT_DIR, "cases.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["tf_cases"] = mod
    spec.loader.exec_module(mod)
    return mod


class TFNamespace:
    """``tensorflow`` plus the few names the case table spells framework-neutrally."""

    name = "tf"

    def __getattr__(self, attr):
        return getattr(tf, attr)

    @staticmethod
    def op_type(tf_name: str) -> str:
        return tf_name

    @staticmethod
    def get_default_graph():
        return tf.compat.v1.get_default_graph()

    hessian_vector_product = staticmethod(gradients_impl._hessian_vector_product)
    no_gradient = staticmethod(tf.no_gradient)

    @staticmethod
    def function(fn=None, input_signature=None):
        """``tf.function`` as the cases run (``autograph=False``: graph semantics, as ``ig.function``)."""
        return tf.function(fn, input_signature=input_signature, autograph=False)


def builtin_base(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        if cls.__module__ == "builtins" and cls not in (object, BaseException, Exception):
            return cls.__name__
    return "Exception"


def to_numpy(leaf) -> np.ndarray:
    if isinstance(leaf, tf.IndexedSlices):
        leaf = tf.convert_to_tensor(leaf)
    if isinstance(leaf, tf.Variable):
        leaf = leaf.read_value()
    return np.asarray(leaf.numpy() if hasattr(leaf, "numpy") else leaf)


def run_case(T, case):
    variables = {k: tf.Variable(np.asarray(v), trainable=t, name=k) for k, (v, t) in case.variables.items()}
    fn = tf.function(lambda *a: case.fn(T, *a, **variables), autograph=False)
    return fn(*[tf.constant(a) for a in case.args])


README_HEAD = """# TensorFlow reference numbers for irgrad's gradient semantics

`cases.py` is one table of {n} small programs `fn(T, *args, **variables)` written against a
namespace `T`; `dev/make_tf_references.py` ran them with `T` = a shim over TensorFlow {tfver}
(inside `tf.function(autograph=False)`, graph semantics) and stored the inputs and outputs in
`references.npz` (`<case>__arg<i>`, `<case>__out<j>`) and the per-case description, program
source, output structure (`tree`: leaf index / null = None / list / dict), dtypes and shapes,
or the exception raised, in `references.json`. `tests/test_tf_references.py` runs the same
programs with `T` = a shim over irgrad. Regenerate (from the repository root):

```
python3 -m venv /work/tfvenv && /work/tfvenv/bin/pip install tensorflow-cpu numpy
/work/tfvenv/bin/python dev/make_tf_references.py
```

Where irgrad knowingly differs from TensorFlow the test is `xfail(strict=True)`; the list is
`DIFFERS` in `tests/test_tf_references.py`.

| case | group | what | TensorFlow's result |
| --- | --- | --- | --- |
"""


def write_readme(table) -> None:
    rows = [README_HEAD.format(n=len(table["cases"]), tfver=table["tensorflow"])]
    for c in table["cases"]:
        if "error" in c:
            result = f"raises `{c['error']['type']}` ({c['error']['builtin']})"
        else:
            result = f"structure `{json.dumps(c['tree'])}`"
        what = " ".join(c["what"].split()).replace("|", "\\|")
        rows.append(f"| `{c['name']}` | {c['group']} | {what} | {result} |\n")
    with open(os.path.join(OUT_DIR, "README.md"), "w") as f:
        f.write("".join(rows))


def main(argv: list[str]) -> int:
    cases = load_cases()
    T = TFNamespace()
    arrays: dict[str, np.ndarray] = {}
    table = {"tensorflow": tf.__version__, "numpy": np.__version__, "cases": []}
    for case in cases.CASES:
        entry = {
            "name": case.name, "group": case.group, "what": case.what,
            "source": textwrap.dedent(inspect.getsource(case.fn)),
            "args": [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in case.args],
            "variables": {k: {"value": np.asarray(v).tolist(), "trainable": t}
                          for k, (v, t) in case.variables.items()},
        }
        for i, a in enumerate(case.args):
            arrays[f"{case.name}__arg{i}"] = a
        try:
            out = run_case(T, case)
        except Exception as e:  # noqa: BLE001 - recorded, the test compares the class
            entry["error"] = {"type": type(e).__name__, "builtin": builtin_base(e),
                              "message": str(e).strip().splitlines()[0][:300] if str(e).strip() else ""}
            print(f"{case.name:42s} raises {type(e).__name__} ({builtin_base(e)}): {entry['error']['message'][:90]}")
        else:
            leaves, tree = cases.flatten(out)
            leaves = [to_numpy(x) for x in leaves]
            entry["tree"] = tree
            entry["outputs"] = [{"dtype": x.dtype.name, "shape": list(x.shape)} for x in leaves]
            for j, x in enumerate(leaves):
                arrays[f"{case.name}__out{j}"] = x
            print(f"{case.name:42s} {len(leaves)} outputs")
        table["cases"].append(entry)
    write_readme(table)
    np.savez_compressed(os.path.join(OUT_DIR, "references.npz"), **arrays)
    with open(os.path.join(OUT_DIR, "references.json"), "w") as f:
        json.dump(table, f, indent=1)
        f.write("\n")
    print(f"{len(table['cases'])} cases -> {os.path.relpath(OUT_DIR, ROOT)}/references.{{npz,json}}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
